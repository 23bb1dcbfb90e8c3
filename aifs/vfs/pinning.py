"""Pinned files: their blocks stay in one tier (RAM or NVMe) until unpinned, across restarts.

Pins are recorded in the metadata (`P` keys); the tiers are told which block ids
to keep. At mount the tiers are told again at once, and the blocks are loaded in
the background. Blocks a pinned file gains by writes are pinned as they commit.
"""

import errno
import logging

from aifs.errors import FsError
from aifs.meta import MetaEngine
from aifs.meta.attrs import BlockRef
from aifs.meta.writestate import MetaWriteFailed
from aifs.tiers.manager import LOCAL_TIERS, TierManager
from aifs.vfs.loading import Loaded, load_blocks, unique_blocks

log = logging.getLogger(__name__)


def _human(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


class Pinner:
    def __init__(self, meta: MetaEngine, tiers: TierManager) -> None:
        self.meta = meta
        self.tiers = tiers
        self.pins: dict[int, str] = meta.pins()
        self._sizes: dict[int, int] = {}  # bytes each pinned file needs, kept current on writes
        self._refused: set[int] = set()  # rule pins that found no room: not retried on every open
        for ino, tier in self.pins.items():
            blocks = self._blocks(ino)
            self._sizes[ino] = sum(ref.length for ref in blocks)
            tiers.pin(tier, [ref.block_id for ref in blocks])

    def _blocks(self, ino: int) -> list[BlockRef]:
        return unique_blocks(self.meta.all_block_refs(ino))

    def _bytes(self, inodes: list[int]) -> int:
        return sum(ref.length for ino in inodes for ref in self._blocks(ino))

    def pinned_bytes(self, tier: str) -> int:
        """Bytes the files pinned to `tier` need there (held or still loading)."""
        return sum(self._sizes.get(ino, 0) for ino, t in self.pins.items() if t == tier)

    def check_room(self, inodes: list[int], tier: str) -> None:
        """Refuse a pin the tier cannot hold, saying how much is needed and how much is free."""
        new = [ino for ino in inodes if self.pins.get(ino) != tier]
        need = self._bytes(new)
        capacity = self.tiers.capacity_of(tier)
        already = self.pinned_bytes(tier)
        free = max(capacity - already, 0)
        if need > free:
            raise FsError(
                errno.ENOSPC,
                f"pinning {len(new)} file(s) needs {_human(need)} in the {tier} tier, but only "
                f"{_human(free)} is available there ({_human(capacity)} capacity, "
                f"{_human(already)} already pinned)",
            )

    async def pin(self, inodes: list[int], tier: str) -> Loaded:
        """Pin files to `tier` and load their blocks there; all or none pass the room check
        (which refuses a tier other than RAM or NVMe)."""
        self.check_room(inodes, tier)
        for ino in inodes:
            self._mark(ino, tier)
        done = Loaded()
        for ino in inodes:
            done.add(await self.load(ino))
        return done

    def _mark(self, ino: int, tier: str) -> None:
        old = self.pins.get(ino)
        if old == tier:
            return
        self.meta.set_pin(ino, tier)  # first: a refused write leaves the tiers as they were
        refs = self._blocks(ino)
        blocks = [ref.block_id for ref in refs]
        if old is not None:
            self.tiers.unpin(old, blocks)
        self.pins[ino] = tier
        self._sizes[ino] = sum(ref.length for ref in refs)
        self.tiers.pin(tier, blocks)
        log.info("inode %d pinned to the %s tier", ino, tier)

    def pin_by_rule(self, ino: int, tier: str) -> bool:
        """A config rule pins a file on open; False (logged) when the tier has no room."""
        if self.pins.get(ino) == tier or ino in self._refused:
            return False
        try:
            self.check_room([ino], tier)
        except FsError as e:
            log.warning("rule pin of inode %d skipped (not retried until the next mount): %s", ino, e)
            self._refused.add(ino)
            return False
        try:
            self._mark(ino, tier)
        except MetaWriteFailed:  # the metadata cannot be written now: a later open pins it
            return False
        return True

    def unpin(self, inodes: list[int]) -> int:
        """Unpin files; their blocks become ordinary cache entries. Returns how many were pinned."""
        count = 0
        for ino in inodes:
            if ino in self.pins:
                self.meta.clear_pin(ino)  # first: a refused write leaves the pin as it was
            tier = self.pins.pop(ino, None)
            self._sizes.pop(ino, None)
            if tier is None:
                continue
            self.tiers.unpin(tier, [ref.block_id for ref in self._blocks(ino)])
            count += 1
        return count

    async def load(self, ino: int) -> Loaded:
        tier = self.pins.get(ino)
        if tier is None:
            return Loaded()
        return await load_blocks(self.tiers, self._blocks(ino), tier)

    async def restore(self) -> None:
        """After a mount: load every pinned file's blocks (the tiers already know to keep them)."""
        for ino in list(self.pins):
            try:
                await self.load(ino)
            except FsError as e:
                log.error("could not reload pinned inode %d: %s", ino, e)

    def blocks_added(self, ino: int, refs: list[BlockRef]) -> None:
        """New blocks of a pinned file (written or truncated) are pinned as they commit."""
        tier = self.pins.get(ino)
        if tier is not None:
            self.tiers.pin(tier, [ref.block_id for ref in refs])
            self._sizes[ino] = self._bytes([ino])

    def status(self) -> dict:
        """Per tier: pinned files, bytes they need, bytes held there now."""
        return {
            tier: {"files": sum(1 for t in self.pins.values() if t == tier),
                   "bytes": self.pinned_bytes(tier),
                   "resident": self.tiers.pinned_bytes(tier)}
            for tier in LOCAL_TIERS
        }
