"""The control operations of sample-order prefetch (aifs.vfs.orderfetch): a reader hints the
order it will read files in, ends its hint, and anyone asks what prefetch did.

The type hints are the control protocol (aifs.control.dispatch checks every request against
them); what they cannot say (the mount's limit on a hint's length, that each inode is a regular
file) is checked here, before the hint replaces the reader's earlier one, so that a bad hint
changes nothing.
"""

import errno
import stat
from typing import Annotated

import trio
from pydantic import Field

from aifs.errors import FsError
from aifs.vfs.admin import Inode
from aifs.vfs.volume import Volume

Reader = Annotated[str, Field(min_length=1, max_length=256)]
Budget = Annotated[int, Field(ge=1, lt=1 << 63)]
CHECK_BATCH = 4096  # inodes looked up between turns of the event loop: FUSE requests wait no longer


class HintOps:
    def __init__(self, volume: Volume) -> None:
        self.vol = volume
        self.order = volume.sample_order

    async def prefetch_hint(self, reader: Reader, inodes: Annotated[list[Inode], Field(min_length=1)],
                            files_ahead: Budget | None = None, bytes_ahead: Budget | None = None) -> dict:
        """From now on fetch ahead of `reader` through these files, in this order (budgets above
        the mount's [prefetch] settings are lowered to them)."""
        limit = self.order.settings.max_files
        if len(inodes) > limit:
            raise FsError(errno.E2BIG, f"a hint of {len(inodes)} files is longer than this mount takes "
                                       f"([prefetch] max_files = {limit}); hint the first {limit} files of the order")
        await self._check_files(inodes)
        return self.order.hint(reader, inodes, files_ahead, bytes_ahead)

    async def _check_files(self, inodes: list[int]) -> None:
        """Every inode is a regular file that exists."""
        for start in range(0, len(inodes), CHECK_BATCH):
            batch = inodes[start:start + CHECK_BATCH]
            for offset, node in enumerate(self.vol.meta.getattrs(batch)):
                where = f"inode {batch[offset]} (at {start + offset} in the hint)"
                if node is None:
                    raise FsError(errno.ENOENT, f"{where} does not exist; hint only files that exist "
                                                "(inodes as stat() gives them on this mount)")
                if not stat.S_ISREG(node.mode):
                    raise FsError(errno.EINVAL, f"{where} is not a regular file; hint only the files to be read")
            await trio.sleep(0)

    async def prefetch_end(self, reader: Reader) -> dict:
        """Forget `reader`'s hint; fetches of files it has not read are cancelled."""
        return {"reader": reader, "ended": self.order.end(reader)}

    async def prefetch_status(self) -> dict:
        return self.order.status()

    def handlers(self) -> dict:
        return {"prefetch_hint": self.prefetch_hint, "prefetch_end": self.prefetch_end,
                "prefetch_status": self.prefetch_status}
