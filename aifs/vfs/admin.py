"""What the control channel can ask of a running volume: status, sync, per-file state, pins."""

import stat
import time
from collections.abc import Iterator

from aifs.errors import FsError
from aifs.vfs.loading import Loaded, load_blocks, unique_blocks
from aifs.vfs.volume import Volume

HOTTEST = 10


class Admin:
    def __init__(self, volume: Volume) -> None:
        self.vol = volume
        self.started = time.monotonic()

    def _files_under(self, ino: int) -> Iterator[int]:
        """Regular files at or below `ino`, depth first."""
        stack = [ino]
        while stack:
            current = stack.pop()
            node = self.vol.meta.getattr(current)
            if stat.S_ISREG(node.mode):
                yield current
            elif node.is_dir:
                stack.extend(child for _, child in self.vol.meta.readdir(current))

    def files_under(self, inodes: list[int]) -> list[int]:
        """Every regular file at or below these inodes, once each."""
        return sorted({f for ino in inodes for f in self._files_under(ino)})

    async def sync(self, inodes: list[int], wait: bool = False) -> dict:
        """Seal open files under the paths, report what is not yet durable, optionally wait for it."""
        files = self.files_under(inodes)
        for ino in files:
            of = self.vol.files.get(ino)
            if of is not None:
                await self.vol.flush(of)
        pending = self.vol.pending_blocks(files)
        report = {"files": len(files), "pending_blocks": len(pending),
                  "pending_bytes": self.vol.tiers.nvme.bytes_of(pending)}
        if wait:
            await self.vol.upload_now(files)
        return report

    async def file_state(self, ino: int) -> dict:
        return self.vol.file_state(ino)

    async def status(self) -> dict:
        tiers = self.vol.tiers
        uploader = self.vol.uploader
        pending = uploader.pending
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return {
            "state_dir": str(self.vol.state_dir),
            "tiers": {
                tier.name: {"used": tier.used(), "capacity": tier.capacity,
                            "hits": tiers.stats[tier.name].hits, "bytes_read": tiers.stats[tier.name].bytes_read}
                for tier in tiers.tiers
            },
            "dirty_bytes": tiers.nvme.dirty_bytes(),
            "pending_blocks": len(pending),
            "pending_bytes": tiers.nvme.bytes_of(pending),
            "uploaded_blocks": uploader.uploaded_blocks,
            "uploaded_bytes": uploader.uploaded_bytes,
            "upload_rate": uploader.uploaded_bytes / elapsed,
            "open_files": len(self.vol.files.all()),
            "pinned": self.vol.pinner.status(),
            "readahead": self.vol.prefetch.status(),
            "hottest_files": self.hottest_files(),
        }

    def hottest_files(self, count: int = HOTTEST) -> list[dict]:
        """The most used files lately; the path when the mount has seen it, else only the inode."""
        heat = self.vol.data.heat.files
        hottest = []
        for ino, value in heat.hottest(2 * count):
            if len(hottest) == count:
                break
            try:
                self.vol.meta.getattr(ino)
            except FsError:  # deleted since: forget it
                heat.forget(ino)
                continue
            hottest.append({"inode": ino, "path": self.vol.names.path_of(ino), "heat": round(value, 3)})
        return hottest

    async def pin(self, inodes: list[int], tier: str) -> dict:
        """Pin every file under the paths to `tier` and load them there before answering."""
        files = self.files_under(inodes)
        done = await self.vol.pinner.pin(files, tier)
        return {"files": len(files), "tier": tier, "loaded_bytes": done.loaded, "warm_bytes": done.warm}

    async def warmup(self, inodes: list[int], tier: str = "nvme") -> dict:
        """Load the files under these inodes into `tier`; blocks already there cost nothing."""
        files = self.files_under(inodes)
        done = Loaded()
        for ino in files:
            refs = unique_blocks(self.vol.meta.all_block_refs(ino))
            done.add(await load_blocks(self.vol.tiers, refs, tier))
        return {"files": len(files), "loaded_bytes": done.loaded, "warm_bytes": done.warm}

    async def unpin(self, inodes: list[int]) -> dict:
        files = self.files_under(inodes)
        return {"files": len(files), "unpinned": self.vol.pinner.unpin(files)}

    def handlers(self) -> dict:
        return {"status": self.status, "sync": self.sync, "file_state": self.file_state,
                "pin": self.pin, "unpin": self.unpin, "warmup": self.warmup}
