"""Bringing a file's blocks into one tier ahead of use: shared by pinning and warmup."""

from dataclasses import dataclass

from aifs.meta.attrs import BlockRef
from aifs.tiers.manager import TierManager


@dataclass
class Loaded:
    """What a load did: bytes fetched into the tier, bytes that were there already, and bytes
    read that the tier did not keep (no room)."""

    loaded: int = 0
    warm: int = 0
    missed: int = 0

    def add(self, other: "Loaded") -> None:
        self.loaded += other.loaded
        self.warm += other.warm
        self.missed += other.missed


def unique_blocks(refs: dict[int, BlockRef]) -> list[BlockRef]:
    """One ref per object: objects may be shared by several refs (packed small files)."""
    seen: dict[int, BlockRef] = {}
    for ref in refs.values():
        seen.setdefault(ref.block_id, ref)
    return list(seen.values())


async def load_blocks(tiers: TierManager, refs: list[BlockRef], tier: str) -> Loaded:
    """Bring each block into `tier` (TierManager.load_into); one the tier did not keep counts
    as missed, not loaded."""
    done = Loaded()
    for ref in refs:
        if tiers.holds(tier, ref.block_id):
            done.warm += ref.length
            continue
        if await tiers.load_into(tier, ref.block_id, ref.checksum, ref.length):
            done.loaded += ref.length
        else:
            done.missed += ref.length
    return done


def missing_bytes(tiers: TierManager, tier: str, refs: list[BlockRef]) -> int:
    """Bytes of these blocks `tier` does not hold now."""
    return sum(ref.length for ref in refs if not tiers.holds(tier, ref.block_id))
