"""Progress of `aifs warmup`, and its summary."""

import threading
import time

from tqdm import tqdm

from aifs.cli.progress import Progress
from aifs.units import rate, size


class WarmupProgress:
    """Counts files and bytes done; shows rate and ETA the same way on and off a terminal.

    Batches finish on several threads (--jobs): one lock keeps counts and lines in order.
    """

    def __init__(self, files: int, nbytes: int, tier: str) -> None:
        self.files, self.nbytes, self.tier = files, nbytes, tier
        self.done_files = self.done_bytes = self.loaded = self.warm = 0
        self.started = time.monotonic()
        self._progress = Progress(f"warmup -> {tier}", nbytes)
        self._lock = threading.Lock()

    def advance(self, files: int, nbytes: int, loaded: int, warm: int) -> None:
        with self._lock:
            self.done_files += files
            self.done_bytes += nbytes
            self.loaded += loaded
            self.warm += warm
            self._progress.show(self.done_bytes, self.nbytes, self._text(), last=self.done_files == self.files)

    def _text(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        speed = self.done_bytes / elapsed
        left = (self.nbytes - self.done_bytes) / speed if speed else float("inf")
        eta = "?" if left == float("inf") else tqdm.format_interval(left)
        return (f"{self.done_files}/{self.files} files, {size(self.done_bytes)}/{size(self.nbytes)}, "
                f"{rate(speed)}, ETA {eta}")

    def summary(self) -> str:
        self._progress.close()
        elapsed = time.monotonic() - self.started
        return (f"warmed {self.done_files} files into {self.tier} in {elapsed:.1f} s: "
                f"{size(self.loaded)} loaded, {size(self.warm)} already there "
                f"({rate(self.loaded / max(elapsed, 1e-9))})")
