"""Blocks fetched for a reader that reads a file broadly at random, handed to the kernel's
page cache (FUSE_NOTIFY_STORE), so that its later reads of them never reach the mount.

A store could overwrite newer bytes that a write put into the same pages, so the mount only
stores while no open handle may write the file, and an open for writing or a truncation of
the file waits until its stores have ended. The store itself runs on a worker thread: the
kernel locks the pages it fills, and a read of one of them may be waiting for a reply from
this event loop.
"""

import logging
import os

import pyfuse3
import trio

from aifs.fuse.cachemode import CacheModes

log = logging.getLogger(__name__)

MEMORY_SHARE = 1 / 8  # of the machine's memory: the pages of larger files are left to reads


class PageStore:
    def __init__(self, modes: CacheModes) -> None:
        self._modes = modes
        self._storing: dict[int, tuple[int, trio.Event]] = {}  # inode: (stores running, all ended)
        self.largest_file = int(  # the volume's file data offers only files up to this size
            os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") * MEMORY_SHARE)

    async def store(self, inode: int, offset: int, data: memoryview) -> bool:
        """Store `data`, the file's current bytes at `offset`, unless a handle may write the file;
        whether the kernel took it."""
        if not self._modes.unwritten(inode):
            return False
        count, ended = self._storing.get(inode, (0, trio.Event()))
        self._storing[inode] = (count + 1, ended)
        try:
            return await trio.to_thread.run_sync(_notify_store, inode, offset, data)
        finally:
            count, ended = self._storing.pop(inode)
            if count > 1:
                self._storing[inode] = (count - 1, ended)
            else:
                ended.set()

    async def settled(self, inode: int) -> None:
        """Return once no store of the file is running (before it may be written)."""
        while inode in self._storing:
            await self._storing[inode][1].wait()


def _notify_store(inode: int, offset: int, data: memoryview) -> bool:
    try:
        pyfuse3.notify_store(inode, offset, data)
        return True
    except OSError as e:  # the kernel forgot the inode, or the mount is going: reads will ask
        log.debug("storing %d bytes of inode %d in the page cache failed: %s", len(data), inode, e)
        return False
