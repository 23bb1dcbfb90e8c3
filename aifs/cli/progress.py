"""Progress of a long command: a tqdm bar on a terminal, plain lines otherwise (at most one a
second, and the last one), so that logs of scripted runs stay short but still show movement."""

import sys
import time

from tqdm import tqdm

PLAIN_EVERY_S = 1.0


class Progress:
    def __init__(self, desc: str, total: int) -> None:
        self.desc = desc
        self._last_line = float("-inf")
        self._bar = None
        if sys.stdout.isatty():
            self._bar = tqdm(total=max(total, 1), desc=desc, file=sys.stdout,
                             bar_format="{desc} {percentage:3.0f}%|{bar}|")

    def show(self, done: int, total: int, text: str, last: bool = False) -> None:
        """`done` of `total` (which may grow), described by `text`."""
        if self._bar is not None:
            self._bar.total = max(total, 1)
            self._bar.set_description_str(f"{self.desc}: {text}", refresh=False)
            self._bar.update(done - self._bar.n)
        elif last or time.monotonic() - self._last_line >= PLAIN_EVERY_S:
            self._last_line = time.monotonic()
            print(f"{self.desc}: {text}", flush=True)

    def note(self, line: str) -> None:
        """A line of its own (a change of state), printed above the bar on a terminal."""
        if self._bar is not None:
            self._bar.write(line, file=sys.stdout)
        else:
            print(line, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
