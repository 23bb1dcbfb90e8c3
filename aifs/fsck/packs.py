"""Packs (aifs.meta.packs) against the blocks that live in them and the durable tier.

Every packed block (M key) must name a recorded pack (A key) that the durable tier holds,
and be needed by the volume (a block ref, a queued upload or queued garbage); each pack's
dead bytes must be its size less the bytes of the members still in it.
"""

from collections import defaultdict
from collections.abc import Iterator
from functools import partial

from aifs.fsck.context import Context
from aifs.fsck.report import Finding, show_key
from aifs.fsck.blocks import live_ids
from aifs.meta import keys
from aifs.meta.kv import Batch
from aifs.meta.packs import PackRecord, PackSlot


def check_packs(ctx: Context) -> Iterator[Finding]:
    records = {keys.read_u64(key, 1): PackRecord.decode(value) for key, value in ctx.meta.kv.scan(keys.PACK)}
    slots = ctx.meta.packed_blocks()
    live = live_ids(ctx.meta.kv)
    held = set(ctx.cold.block_ids())
    members: dict[int, list[tuple[int, PackSlot]]] = defaultdict(list)
    for block_id, slot in sorted(slots.items()):
        if slot.pack_id not in records:
            yield Finding("packed-without-pack", show_key(keys.packed(block_id)),
                          f"block {block_id:016x} is said to live in pack {slot.pack_id:016x}, which is not "
                          "recorded: its durable copy cannot be found", block=block_id)
        elif block_id not in live:
            yield Finding("packed-unneeded", show_key(keys.packed(block_id)),
                          f"block {block_id:016x} in pack {slot.pack_id:016x} is needed by nothing",
                          "take it out of its pack", partial(ctx.meta.settle_packed, [block_id]), block=block_id)
        else:
            members[slot.pack_id].append((block_id, slot))
    for pack_id, record in sorted(records.items()):
        yield from _check_pack(ctx, pack_id, record, members[pack_id], held)
    ctx.stats["packs"] = len(records)


def _check_pack(ctx: Context, pack_id: int, record: PackRecord, members: list[tuple[int, PackSlot]],
                held: set[int]) -> Iterator[Finding]:
    key = show_key(keys.pack(pack_id))
    if members and not any(block_id in held for block_id, _ in members):
        yield Finding("pack-missing", key, f"the durable tier does not hold pack {pack_id:016x}, the only "
                      f"durable copy of {len(members)} block(s)", block=pack_id)
    dead = record.size - sum(slot.length for _, slot in members)
    if dead != record.dead_bytes:
        yield Finding("pack-accounting", key, f"pack {pack_id:016x} counts {record.dead_bytes} dead bytes of "
                      f"{record.size}, but its live members leave {dead}", f"set its dead bytes to {dead}",
                      partial(_set_dead_bytes, ctx, pack_id, record, dead), block=pack_id)


def _set_dead_bytes(ctx: Context, pack_id: int, record: PackRecord, dead: int) -> None:
    batch = Batch()
    batch.put(keys.pack(pack_id), record._replace(dead_bytes=dead).encode())
    ctx.meta.kv.commit(batch)
