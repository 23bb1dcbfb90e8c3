"""What the control channel can ask of a running volume: status, sync, per-file state."""

import stat
import time
from collections.abc import Iterator

from aifs.vfs.volume import Volume


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

    async def sync(self, inodes: list[int], wait: bool = False) -> dict:
        """Seal open files under the paths, report what is not yet durable, optionally wait for it."""
        files = sorted({f for ino in inodes for f in self._files_under(ino)})
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
        }

    def handlers(self) -> dict:
        return {"status": self.status, "sync": self.sync, "file_state": self.file_state}
