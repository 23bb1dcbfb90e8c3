"""Damaged NVMe segment records, settled against the blocks the volume still needs from NVMe:
those referenced by a file and not in the durable tier (aifs.tiers.salvage).

A record whose header is damaged but whose bytes match its block's checksum gets a sound
header again; one whose bytes do not match is reported by file, and its block is reported
lost by the block check. Damaged bytes that hold nothing the volume needs are neutralised.
Without --repair the NVMe tier is open read-only, so nothing is written, yet the records
found are indexed all the same: the block check counts them as held.
"""

from collections.abc import Iterator
from functools import partial
from pathlib import Path

from aifs.fsck.context import Context
from aifs.fsck.report import Finding
from aifs.meta import keys
from aifs.meta.attrs import BlockRef
from aifs.tiers.nvme import NvmeTier
from aifs.tiers.segments import DamagedRegion, Found

Needed = dict[int, tuple[int, int, BlockRef]]  # block id -> (inode, block index, ref)


def check_damage(ctx: Context) -> Iterator[Finding]:
    nvme = ctx.nvme
    if isinstance(nvme, NvmeTier) and nvme.damaged:
        yield from _Damage(ctx, nvme).findings()


class _Damage:
    def __init__(self, ctx: Context, nvme: NvmeTier) -> None:
        self.ctx = ctx
        self.nvme = nvme
        self.needed = _needed(ctx)
        self.salvage = nvme.salvage({b: ref.checksum for b, (_, _, ref) in self.needed.items()},
                                    {b: ref.length for b, (_, _, ref) in self.needed.items()})
        self.lost = {region.says_block for region in self.salvage.regions
                     if region.says_block in self.needed and not nvme.contains(region.says_block)}
        named = self.lost | {found.block_id for found in self.salvage.recovered}
        self.paths = ctx.namespace().file_paths(ctx.meta.kv, {self.needed[b][0] for b in named})

    def findings(self) -> Iterator[Finding]:
        for found in self.salvage.recovered:
            yield self._recovered(found)
        for region in self.salvage.regions:
            yield self._lost(region) if region.says_block in self.lost else self._spare(region)

    def _recovered(self, found: Found) -> Finding:
        where = self.nvme.segment_path(found.location.segment)
        return Finding(
            "damaged-record", self._subject(found.block_id, where, found.location.header_offset),
            "its NVMe record header is damaged, but its bytes still match the block's checksum",
            "rewrite its header", partial(self.nvme.rewrite_header, found),
            ino=self.needed[found.block_id][0], block=found.block_id,
        )

    def _lost(self, region: DamagedRegion) -> Finding:
        block_id = region.says_block
        assert block_id is not None
        return Finding(
            "damaged-record", self._subject(block_id, region.path, region.start),
            "its NVMe record is damaged and its bytes do not match the block's checksum: the block is lost",
            ino=self.needed[block_id][0], block=block_id,
        )

    def _spare(self, region: DamagedRegion) -> Finding:
        return Finding("damaged-region", region.describe(),
                       "damaged NVMe segment bytes that hold no block the volume needs from NVMe",
                       "neutralise it", partial(self.nvme.neutralise, region))

    def _subject(self, block_id: int, segment: Path, offset: int) -> str:
        ino, index, ref = self.needed[block_id]
        start = index * self.ctx.meta.block_size
        return (f"{self.paths[ino]} bytes [{start}, {start + ref.length}) (inode {ino}, block {index}, "
                f"object {block_id:016x}): record in {segment} at offset {offset}")


def _needed(ctx: Context) -> Needed:
    """Blocks of existing files that the durable tier does not hold: only NVMe has them."""
    durable = set(ctx.cold.block_ids())
    inodes = ctx.namespace().inodes
    needed: Needed = {}
    for key, value in ctx.meta.kv.scan(keys.BLOCK):
        ino = keys.read_u64(key, 1)
        if ino in inodes:
            ref = BlockRef.decode(value)
            if ref.block_id not in durable:
                needed[ref.block_id] = (ino, keys.read_u64(key, 9), ref)
    return needed
