"""Dropping the kernel's caches, so "cold" workloads really reach the filesystem."""

import mmap
import os
from collections.abc import Callable
from pathlib import Path

from aifs.config.system import mem_available

DROP_CACHES = "/proc/sys/vm/drop_caches"
NOT_DROPPED = "caches not dropped"
_TOUCH = bytes(1 << 20)


class CacheDropper:
    """Syncs, then empties the page, dentry and inode caches (needs root).

    Called with no arguments it returns None, or NOT_DROPPED when the kernel refused;
    it warns only once since the answer will not change during a run. With `back` it then
    has that many bytes of free memory backed (see back_free_memory).
    """

    def __init__(self, warn: Callable[[str], None], back: int = 0) -> None:
        self._warn = warn
        self._permitted = True
        self._back = back

    def __call__(self) -> str | None:
        os.sync()
        if self._permitted:
            try:
                with open(DROP_CACHES, "w") as control:
                    control.write("3")
            except OSError as error:
                self._permitted = False
                self._warn(f"warning: cannot drop caches ({error}); results marked '{NOT_DROPPED}'")
            else:
                back_free_memory(self._back)  # its own failure is not the kernel refusing the drop
                return None
        return NOT_DROPPED


def back_free_memory(size: int) -> int:
    """Write `size` bytes of fresh memory (at most half of what is available), then free them;
    the bytes written.

    A virtual machine whose host takes back the guest's free pages (virtio-balloon free page
    reporting) pays a fault on the host at the first touch of such a page. A cold read fills
    the reader's page cache with free pages, and the copy into them is the first touch: after
    a phase that freed little memory it pays those faults inside the filesystem's replies,
    after one that freed much it does not, so columns would differ by what ran before them.
    """
    size = min(size, mem_available() // 2) // len(_TOUCH) * len(_TOUCH)
    if size > 0:
        with mmap.mmap(-1, size) as region:
            for offset in range(0, size, len(_TOUCH)):
                region[offset:offset + len(_TOUCH)] = _TOUCH
    return max(size, 0)


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
