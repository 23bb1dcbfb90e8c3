"""Bringing a file's blocks into one tier ahead of use: shared by pinning and warmup."""

from dataclasses import dataclass

import trio

from aifs.meta.attrs import BlockRef
from aifs.tiers.manager import TierManager
from aifs.tiers.nvme import NvmeTier
from aifs.tiers.priority import Priority
from aifs.tiers.ram import RamTier

TIER_NAMES = ("ram", "nvme")


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


def tier_named(tiers: TierManager, name: str) -> RamTier | NvmeTier:
    """The RAM or NVMe tier by name; anything else is a caller's mistake."""
    if name not in TIER_NAMES:
        raise ValueError(f"tier must be one of {', '.join(TIER_NAMES)}, not {name!r}")
    return tiers.ram if name == "ram" else tiers.nvme


def unique_blocks(refs: dict[int, BlockRef]) -> list[BlockRef]:
    """One ref per object: objects may be shared by several refs (packed small files)."""
    seen: dict[int, BlockRef] = {}
    for ref in refs.values():
        seen.setdefault(ref.block_id, ref)
    return list(seen.values())


async def load_blocks(tiers: TierManager, refs: list[BlockRef], tier: str) -> Loaded:
    """Read each block through the tiers (verified) so that it lands in `tier`.

    Reads do not promote in RAM: loading is not a use. A block found in RAM but
    missing from NVMe is written down to NVMe when NVMe is the target. A block the
    tier did not keep (too large for it, or no room beside dirty and pinned blocks)
    counts as missed, not loaded.
    """
    target = tier_named(tiers, tier)
    done = Loaded()
    for ref in refs:
        if target.contains(ref.block_id):
            done.warm += ref.length
            continue
        data = await tiers.read(ref.block_id, ref.checksum, ref.length, promote=False, priority=Priority.WARMUP)
        if target is tiers.nvme and not tiers.nvme.contains(ref.block_id):
            await trio.to_thread.run_sync(tiers.nvme.put, ref.block_id, data)
        if target.contains(ref.block_id):
            done.loaded += ref.length
        else:
            done.missed += ref.length
    return done


def missing_bytes(tier: RamTier | NvmeTier, refs: list[BlockRef]) -> int:
    """Bytes of these blocks the tier does not hold now."""
    return sum(ref.length for ref in refs if not tier.contains(ref.block_id))
