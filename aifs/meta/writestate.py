"""Whether the metadata store takes writes, and what to tell callers while it does not.

A write RocksDB fails (a full disk, an I/O error) leaves its WAL writer broken for good:
every later write fails too, even once space returns, until the database is reopened.
So the first failure turns the store read-only for metadata changes; reads go on. Later
writes are refused at once with the same error, until a reopen is worth trying: for a full
disk, once the file system has room for the WAL to be replayed, otherwise after a pause.
The change of state is logged once each way, never once per refused request.
"""

import errno
import logging
import os
import threading
import time
from pathlib import Path

from aifs.errors import FsError

log = logging.getLogger(__name__)

REOPEN_EVERY_S = 1.0  # the least time between two reopens of a store that keeps failing
REOPEN_HEADROOM = 1 << 20  # room a reopen needs beside the WAL it replays (manifest, options, info log)
_SPACE = {errno.ENOSPC: "no space left", errno.EDQUOT: "disk quota exceeded"}


class MetaWriteFailed(FsError):
    """A metadata change the store could not make: ENOSPC for a full disk or quota, EIO
    otherwise. The store logs when it turns read-only, so callers need not log each one."""

    @property
    def reason(self) -> str:
        return self.args[1]


class MetaUnavailable(MetaWriteFailed):
    """A shared engine that cannot be reached (EIO) for reads and writes alike, for now: work
    that waits on it (uploads, sweeps, heartbeats) is kept and retried, never given up."""


def classify(error: Exception, meta_dir: Path) -> MetaWriteFailed:
    """RocksDB's error (rocksdict raises it as a plain Exception) as an errno and a one-line
    reason that names the metadata directory."""
    detail = str(error).splitlines()[0] if str(error) else type(error).__name__
    for code, what in _SPACE.items():
        if os.strerror(code) in detail:
            return MetaWriteFailed(errno.ENOSPC, f"{what} on the metadata file system ({meta_dir}): "
                                                 "metadata is read-only until space is freed")
    return MetaWriteFailed(errno.EIO, f"the metadata store in {meta_dir} failed a write ({detail}): "
                                      "metadata is read-only until it can be reopened")


def wal_bytes(meta_dir: Path) -> int:
    """Bytes of the write-ahead logs a reopen replays into new table files."""
    total = 0
    for entry in os.scandir(meta_dir):
        if entry.name.endswith(".log"):
            try:
                total += entry.stat().st_size
            except FileNotFoundError:  # deleted by RocksDB meanwhile
                pass
    return total


def sync_wal_files(meta_dir: Path) -> None:
    """fsync the write-ahead logs through fds of our own: what a broken writer had already
    handed to the kernel becomes durable without RocksDB's help."""
    for entry in os.scandir(meta_dir):
        if not entry.name.endswith(".log"):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class WriteState:
    """The failure that made a store read-only (None while writes succeed), and when to
    try reopening it."""

    def __init__(self, meta_dir: Path) -> None:
        self.meta_dir = meta_dir
        self.failure: MetaWriteFailed | None = None
        self.wal_intact = False
        self._retry_at = 0.0
        self._recording = threading.Lock()  # a failed sync on a worker thread meets a failed write

    def failed(self, error: Exception, wal_intact: bool) -> MetaWriteFailed:
        """Record a failed open, write or sync and return the error for the caller.
        `wal_intact`: every write acknowledged so far is still in the WAL files, as when RocksDB
        could not append to its WAL or open for lack of space; never after a failed fsync,
        which may have dropped pages. Only a full disk is trusted to have lost nothing."""
        with self._recording:
            if self.failure is not None:
                return self.failure
            failure = classify(error, self.meta_dir)
            self.wal_intact = wal_intact and failure.errno == errno.ENOSPC
            gap = 0.0 if failure.errno == errno.ENOSPC else REOPEN_EVERY_S
            self._retry_at = time.monotonic() + gap
            self.failure = failure
        log.error("%s (%s)", failure.reason, error)
        return failure

    def may_retry(self) -> bool:
        """Is a reopen worth trying now? Not more often than REOPEN_EVERY_S after one failed,
        and for a full disk only once it has room to replay the WAL."""
        if time.monotonic() < self._retry_at:
            return False
        if self.failure is not None and self.failure.errno == errno.ENOSPC:
            stats = os.statvfs(self.meta_dir)
            return stats.f_bavail * stats.f_frsize >= wal_bytes(self.meta_dir) + REOPEN_HEADROOM
        return True

    def reopen_failed(self, error: Exception) -> None:
        """The reopen failed too: the store stays read-only, for the reason it gave now."""
        self.failure = classify(error, self.meta_dir)
        self._retry_at = time.monotonic() + REOPEN_EVERY_S
        log.debug("reopening the metadata store failed: %s", error)

    def recovered(self) -> None:
        log.warning("metadata in %s is writable again (reopened after: %s)", self.meta_dir, self.failure.reason)
        self.failure = None
        self.wal_intact = False
