"""What the control channel can ask of a running volume: status, stats, sync, per-file state, pins,
where files' bytes are.

The type hints are the control protocol: the control server checks every request against
them (aifs.control.dispatch) before a handler runs. Every request is bounded in time except
those that load or move data (pin, warmup, pack), which the CLI splits into batches.
"""

import stat
import time
from dataclasses import asdict
from collections.abc import Iterator
from typing import Annotated, Literal

import trio
from pydantic import Field

from aifs.errors import FsError
from aifs.meta.attrs import BlockRef
from aifs.push.plan import push_plan
from aifs.vfs.loading import Loaded, load_blocks, missing_bytes, unique_blocks
from aifs.vfs.locate import Locator
from aifs.vfs.stats import stats_sample
from aifs.vfs.status import durable_health, status_report
from aifs.vfs.volume import Volume

Inode = Annotated[int, Field(ge=1, lt=1 << 64)]
TierName = Literal["ram", "nvme"]
SYNC_WAIT_S = 1.0  # the longest one sync request waits for uploads before it reports
FREEZE_BATCH = 256  # inodes frozen or thawed per transaction


class Admin:
    def __init__(self, volume: Volume) -> None:
        self.vol = volume
        self.started = time.monotonic()
        self.locator = Locator(volume)

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

    async def sync(self, inodes: list[Inode], wait: bool = False) -> dict:
        """Seal open files under the paths and report what is not yet durable; with `wait`,
        first wait up to SYNC_WAIT_S for it to be uploaded (the caller asks again until
        nothing is pending, and sees the durable tier's health meanwhile)."""
        files = self.files_under(inodes)
        for ino in files:
            of = self.vol.files.get(ino)
            if of is not None:
                await self.vol.flush(of)
        if wait:
            with trio.move_on_after(SYNC_WAIT_S):
                await self.vol.upload_now(files)
        pending = self.vol.pending_blocks(files)
        return {"files": len(files), "pending_blocks": len(pending),
                "pending_bytes": self.vol.tiers.pending_bytes(pending),
                "durable": {"tier": self.vol.tiers.durable_name, **durable_health(self.vol.tiers)}}

    async def file_state(self, ino: Inode) -> dict:
        self.vol.meta.getattr(ino)  # a file that does not exist is in no state at all (ENOENT)
        return self.vol.file_state(ino)

    async def status(self) -> dict:
        return status_report(self.vol, self.started)

    async def stats(self) -> dict:
        """Counters for `aifs stats`, which asks every interval and turns their growth into rates."""
        return stats_sample(self.vol, self.started)

    async def pin(self, inodes: list[Inode], tier: TierName) -> dict:
        """Pin every file under the paths to `tier` and load them there before answering."""
        files = self.files_under(inodes)
        done = await self.vol.pinner.pin(files, tier)
        return {"files": len(files), "tier": tier, "loaded_bytes": done.loaded, "warm_bytes": done.warm,
                "missed_bytes": done.missed}

    async def warmup(self, inodes: list[Inode], tier: TierName = "nvme") -> dict:
        """Load the files under these inodes into `tier`; blocks already there cost nothing."""
        files = self.files_under(inodes)
        done = Loaded()
        for ino in files:
            done.add(await load_blocks(self.vol.tiers, self._blocks(ino), tier))
        return {"files": len(files), "loaded_bytes": done.loaded, "warm_bytes": done.warm}

    async def pack(self, inodes: list[Inode]) -> dict:
        """Move the small blocks of these files that are stored on their own into packs, in
        the order given (aifs.vfs.repack); entries gone or not regular files are passed over."""
        files = [ino for ino in inodes if self._is_file(ino)]
        report = await self.vol.repacker.pack_files(files)
        return asdict(report) | {"not_files": len(inodes) - len(files)}

    def _is_file(self, ino: int) -> bool:
        try:
            return stat.S_ISREG(self.vol.meta.getattr(ino).mode)
        except FsError:
            return False

    async def resident(self, inodes: list[Inode], tier: TierName) -> dict:
        """How much of the files under these inodes `tier` holds now: what a warmup left there
        once later blocks had pushed out earlier ones."""
        tiers = self.vol.tiers
        files = self.files_under(inodes)
        total = missing = short_files = 0
        for ino in files:
            refs = self._blocks(ino)
            absent = missing_bytes(tiers, tier, refs)
            total += sum(ref.length for ref in refs)
            missing += absent
            short_files += absent > 0
        return {"files": len(files), "bytes": total, "missing_bytes": missing, "missing_files": short_files,
                "capacity": tiers.capacity_of(tier)}

    async def locate(self, inodes: list[Inode], skip: list[str] | None = None) -> dict:
        """Where the bytes of each file under these inodes are, by place (aifs.vfs.locate); the
        nodes in `skip` did not answer an earlier request of the caller's and are not asked."""
        return await self.locator.locate(self.files_under(inodes), skip or [])

    def _blocks(self, ino: int) -> list[BlockRef]:
        return unique_blocks(self.vol.meta.all_block_refs(ino))

    async def push_plan(self, inodes: list[Inode]) -> dict:
        """Where the blocks of these files are, for `aifs push` (aifs.push.plan)."""
        return await push_plan(self.vol, inodes)

    async def unpin(self, inodes: list[Inode]) -> dict:
        files = self.files_under(inodes)
        return {"files": len(files), "unpinned": self.vol.pinner.unpin(files)}

    async def freeze(self, inodes: list[Inode], frozen: bool) -> dict:
        """Freeze (or thaw) every inode at or below these, top down: a directory is frozen
        before its entries are listed, so nothing can be added to what was walked already."""
        count = 0
        for top in inodes:
            for batch in self._tree_batches(top):
                self.vol.meta.set_frozen(batch, frozen)
                count += len(batch)
                await trio.sleep(0)
        return {"inodes": count, "frozen": frozen}

    def _tree_batches(self, top: int) -> Iterator[list[int]]:
        self.vol.meta.getattr(top)  # ENOENT for a tree that is gone
        yield [top]
        directories = [top]
        while directories:
            batch: list[int] = []
            for ino in (child for _, child in self.vol.meta.readdir(directories.pop())):
                if self.vol.meta.getattr(ino).is_dir:
                    directories.append(ino)
                batch.append(ino)
                if len(batch) == FREEZE_BATCH:
                    yield batch
                    batch = []
            if batch:
                yield batch

    def handlers(self) -> dict:
        return {"status": self.status, "stats": self.stats, "sync": self.sync, "file_state": self.file_state,
                "pin": self.pin, "unpin": self.unpin, "warmup": self.warmup, "resident": self.resident, "pack": self.pack,
                "freeze": self.freeze, "locate": self.locate, "push_plan": self.push_plan}
