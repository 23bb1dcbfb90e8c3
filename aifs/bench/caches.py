"""Dropping the kernel's caches, so "cold" workloads really reach the filesystem."""

import os
from collections.abc import Callable
from pathlib import Path

DROP_CACHES = "/proc/sys/vm/drop_caches"
NOT_DROPPED = "caches not dropped"


class CacheDropper:
    """Syncs, then empties the page, dentry and inode caches (needs root).

    Called with no arguments it returns None, or NOT_DROPPED when the kernel refused;
    it warns only once since the answer will not change during a run.
    """

    def __init__(self, warn: Callable[[str], None]) -> None:
        self._warn = warn
        self._permitted = True

    def __call__(self) -> str | None:
        os.sync()
        if self._permitted:
            try:
                with open(DROP_CACHES, "w") as control:
                    control.write("3")
                return None
            except OSError as error:
                self._permitted = False
                self._warn(f"warning: cannot drop caches ({error}); results marked '{NOT_DROPPED}'")
        return NOT_DROPPED


def evict_files(*roots: Path) -> None:
    """Drop the page cache of the files under `roots` only, leaving every other cache warm.

    A mode that must read one party's data cold (the node's NVMe) while
    another keeps what it would keep in production (a block server's RAM) cannot use
    drop_caches, which empties them all. Clean pages only: it syncs first. Needs no root.
    """
    os.sync()
    for root in roots:
        for path in root.rglob("*"):
            if not path.is_file() or path.is_symlink():
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:  # a live server's segment retired meanwhile
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
