"""Progress of `aifs warmup`: a tqdm bar on a terminal, plain lines otherwise, and a summary."""

import sys
import threading
import time

from tqdm import tqdm

PLAIN_EVERY_S = 1.0


def _size(nbytes: float) -> str:
    return tqdm.format_sizeof(nbytes, "B", 1024)


class WarmupProgress:
    """Counts files and bytes done; shows rate and ETA the same way on and off a terminal.

    Batches finish on several threads (--jobs): one lock keeps counts and lines in order.
    """

    def __init__(self, files: int, nbytes: int, tier: str) -> None:
        self.files, self.nbytes, self.tier = files, nbytes, tier
        self.done_files = self.done_bytes = self.loaded = self.warm = 0
        self.started = time.monotonic()
        self._last_line = float("-inf")
        self._bar = None
        self._lock = threading.Lock()
        if sys.stdout.isatty():
            self._bar = tqdm(total=nbytes, unit="B", unit_scale=True, unit_divisor=1024,
                             desc=f"warmup -> {tier}", file=sys.stdout)

    def advance(self, files: int, nbytes: int, loaded: int, warm: int) -> None:
        with self._lock:
            self._advance(files, nbytes, loaded, warm)

    def _advance(self, files: int, nbytes: int, loaded: int, warm: int) -> None:
        self.done_files += files
        self.done_bytes += nbytes
        self.loaded += loaded
        self.warm += warm
        if self._bar is not None:
            self._bar.set_postfix_str(f"{self.done_files}/{self.files} files", refresh=False)
            self._bar.update(nbytes)
        elif time.monotonic() - self._last_line >= PLAIN_EVERY_S or self.done_files == self.files:
            self._last_line = time.monotonic()
            print(self._plain_line(), flush=True)

    def _plain_line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done_bytes / elapsed
        left = (self.nbytes - self.done_bytes) / rate if rate else float("inf")
        eta = "?" if left == float("inf") else tqdm.format_interval(left)
        return (f"warmup -> {self.tier}: {self.done_files}/{self.files} files, "
                f"{_size(self.done_bytes)}/{_size(self.nbytes)}, {_size(rate)}/s, ETA {eta}")

    def summary(self) -> str:
        if self._bar is not None:
            self._bar.close()
        elapsed = time.monotonic() - self.started
        return (f"warmed {self.done_files} files into {self.tier} in {elapsed:.1f} s: "
                f"{_size(self.loaded)} loaded, {_size(self.warm)} already there "
                f"({_size(self.loaded / max(elapsed, 1e-9))}/s)")
