"""NVMe copies of blocks read from below, written by one thread in batches.

A block read from S3, a flash server or a peer is copied to NVMe for the next read. Its
reader holds it already, so neither the reader nor the event loop waits for that write:
one thread takes whatever has gathered and lands it with one write per segment. A data
set of small files read at thousands of files a second then costs a few large writes, not
a disk round trip per file. The queue is bounded in bytes; a block that finds it full is
not queued, and the caller decides whether to copy it itself.
"""

import logging
import threading
from collections.abc import Callable

from aifs.tiers.checksum import Buffer

log = logging.getLogger(__name__)

MAX_BYTES = 64 << 20  # block bytes waiting to be written
MAX_BATCH = 256  # blocks per landing, so one batch never holds up close() for long
DRAIN_S = 10.0  # how long close() lets queued copies land

Land = Callable[[list[tuple[int, Buffer]]], None]


class Fills:
    """A bounded queue of (block id, bytes) that one daemon thread hands to `land` in batches."""

    def __init__(self, land: Land, max_bytes: int = MAX_BYTES) -> None:
        self._land = land
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._queue: list[tuple[int, Buffer]] = []
        self._bytes = 0  # queued or being landed
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="aifs-fill", daemon=True)
        self._thread.start()

    def submit(self, block_id: int, data: Buffer) -> bool:
        """Queue a copy; False, queuing nothing, when the queue is full or closed."""
        with self._lock:
            if self._closed or self._bytes + len(data) > self.max_bytes:
                return False
            self._queue.append((block_id, data))
            self._bytes += len(data)
            self._changed.notify_all()
        return True

    @property
    def pending(self) -> int:
        """Bytes queued or being written."""
        return self._bytes

    def _work(self) -> None:
        while (batch := self._next_batch()) is not None:
            try:
                self._land(batch)
            except Exception as e:  # a cache copy that failed must not stop the thread
                log.warning("copying %d blocks to NVMe failed: %r", len(batch), e)
            finally:
                with self._lock:
                    self._bytes -= sum(len(data) for _, data in batch)
                    self._changed.notify_all()

    def _next_batch(self) -> list[tuple[int, Buffer]] | None:
        """The oldest queued copies, waiting for some; None once closed with none left."""
        with self._changed:
            self._changed.wait_for(lambda: self._queue or self._closed)
            if not self._queue:
                return None
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            return batch

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every queued copy has landed; False when `timeout` passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: self._bytes == 0, timeout)

    def close(self, drain: float = DRAIN_S) -> None:
        """Refuse new copies and give queued ones `drain` seconds to land; the rest is dropped
        (a cache copy: the block is read from below again when next wanted)."""
        with self._lock:
            self._closed = True
            self._changed.notify_all()
        if not self.wait_idle(drain):
            with self._lock:
                dropped, self._queue = len(self._queue), []
            log.warning("dropping %d NVMe copies still queued after %.0f s", dropped, drain)
        self._thread.join(drain)
