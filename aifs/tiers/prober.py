"""A prober that brings servers back: callers stop sending requests to a server whose
circuit breaker is open, so something else must notice when it answers again.

Every `interval` seconds the prober calls `probe(server)` for each server that is
down; the probe asks the server something cheap and closes its breaker when it answers.
"""

import threading
from collections.abc import Callable, Iterable


class Prober:
    """A daemon thread that calls `probe(server)` for each down server every `interval` seconds."""

    def __init__(self, down: Callable[[], Iterable[str]], probe: Callable[[str], None], interval: float) -> None:
        self._down = down
        self._probe = probe
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="aifs-prober", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for server in list(self._down()):
                self._probe(server)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
