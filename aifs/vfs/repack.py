"""Packs made from blocks that are already durable (docs/packing.md).

`aifs pack` moves the small blocks of existing files, stored one object each, into packs
in the order it is given (path or modification time); garbage collection moves the live
blocks of a pack more than half dead into a new one, in their order. Either way a block
keeps its id, so files, inodes, attributes and every cached copy stay as they are: only
where the durable copy lives changes, in one commit per pack that holds only the
blocks still where they were when the pack was built (aifs.meta.packs.repack).
"""

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import trio

from aifs.config.models import WritebackConfig
from aifs.errors import FsError
from aifs.meta import MetaEngine, keys
from aifs.meta.attrs import BlockRef
from aifs.meta.packs import PackMember, PackSlot, Voucher, encode_slot
from aifs.tiers.checksum import checksum
from aifs.tiers.manager import TierManager
from aifs.tiers.priority import Priority
from aifs.vfs.packing import MAX_MEMBERS

log = logging.getLogger(__name__)

READS_AT_ONCE = 8  # blocks of one pack fetched at a time


@dataclass
class _Candidate:
    block_id: int
    ref: BlockRef
    vouchers: list[Voucher]


@dataclass
class PackReport:
    files: int = 0
    packs: int = 0
    blocks: int = 0
    bytes: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


class Repacker:
    def __init__(self, meta: MetaEngine, tiers: TierManager, settings: WritebackConfig) -> None:
        self.meta = meta
        self.tiers = tiers
        self.below = settings.pack_below
        self.size = settings.pack_size

    # -- aifs pack ---------------------------------------------------------------------

    async def pack_files(self, inodes: list[int]) -> PackReport:
        """Pack the small blocks of these files that are stored on their own, in this order."""
        report = PackReport(files=len(inodes))
        candidates = self._candidates(inodes, report)
        for group in self._groups(candidates):
            data = await self._fetch(group, report)
            await self._commit(group, data, report)
        return report

    def _candidates(self, inodes: list[int], report: PackReport) -> list[_Candidate]:
        """The blocks worth packing, in file order: small, uploaded, not packed yet."""
        found: list[_Candidate] = []
        seen: set[int] = set()  # a block shared by refs is packed once
        for ino in inodes:
            for index, value in sorted(self.meta.block_ref_values(ino).items()):
                ref = BlockRef.decode(value)
                if ref.block_id in seen:
                    continue
                seen.add(ref.block_id)
                if not self.below or ref.length >= self.below:
                    report.skip("large")
                    continue
                found.append(_Candidate(ref.block_id, ref, [
                    Voucher(keys.block(ino, index), value),  # the file still has this block there
                    Voucher(keys.packed(ref.block_id), None),  # and it is not in a pack yet
                    Voucher(keys.upload(ref.block_id), None),  # and it is durable
                ]))
        ids = [c.block_id for c in found]
        waiting = set(self.meta.pending_among(ids))
        packed = {b for b, v in zip(ids, self.meta.kv.multi_get([keys.packed(b) for b in ids])) if v}
        for block_id in waiting | packed:
            report.skip("not yet uploaded" if block_id in waiting else "already packed")
        return [c for c in found if c.block_id not in waiting | packed]

    def _groups(self, candidates: list[_Candidate]) -> Iterator[list[_Candidate]]:
        group: list[_Candidate] = []
        nbytes = 0
        for candidate in candidates:
            if group and (nbytes + candidate.ref.length > self.size or len(group) >= MAX_MEMBERS):
                yield group
                group, nbytes = [], 0
            group.append(candidate)
            nbytes += candidate.ref.length
        if len(group) > 1:  # a pack of one block would save nothing
            yield group

    async def _fetch(self, group: list[_Candidate], report: PackReport) -> list[bytes | None]:
        """Each block's bytes, verified, from whichever tier has them; None for one that
        cannot be read now (it stays where it is)."""
        found: list[bytes | None] = [None] * len(group)
        limit = trio.CapacityLimiter(READS_AT_ONCE)

        async def one(i: int) -> None:
            ref = group[i].ref
            async with limit:
                try:
                    found[i] = await self.tiers.read(ref.block_id, ref.checksum, ref.length, promote=False,
                                                     priority=Priority.WARMUP)
                except FsError as e:
                    log.warning("aifs pack leaves block %016x where it is: %s", ref.block_id, e)
                    report.skip("unreadable")

        async with trio.open_nursery() as nursery:
            for i in range(len(group)):
                nursery.start_soon(one, i)
        return found

    async def _commit(self, group: list[_Candidate], data: list[bytes | None], report: PackReport) -> None:
        members, vouchers, parts, offset = [], [], [], 0
        for candidate, block in zip(group, data):
            if block is None or len(block) != candidate.ref.length:
                continue
            members.append(PackMember(candidate.block_id, offset, len(block), candidate.ref.checksum))
            vouchers.append(candidate.vouchers)
            parts.append(block)
            offset += len(block)
        if len(members) < 2:
            return
        moved = await self._write(members, vouchers, b"".join(parts))
        report.packs += 1
        report.blocks += len(moved)
        report.bytes += sum(m.length for m in moved)

    async def _write(self, members: list[PackMember], vouchers: list[list[Voucher]], data: bytes) -> list[PackMember]:
        """Put the pack, durable, then record it; returns the members that moved into it."""
        pack_id = self.meta.new_pack()
        try:
            await self.tiers.put_durable(pack_id, data)
        except OSError:
            self.meta.abandon_packs([pack_id])
            raise
        return self.meta.repack(pack_id, members, vouchers)

    # -- garbage collection --------------------------------------------------------------

    async def compact(self, pack_id: int) -> int:
        """Move the live blocks of a mostly dead pack into a new pack, in their order; returns
        how many moved (0: none to move, or the pack could not be read now)."""
        record = self.meta.pack_record(pack_id)
        if record is None:
            return 0
        places = [encode_slot(PackSlot(pack_id, m.offset, m.length)) for m in record.members]
        now = self.meta.kv.multi_get([keys.packed(m.block_id) for m in record.members])
        live = [(m, place) for m, place, value in zip(record.members, places, now) if value == place]
        if not live:
            return 0
        old = await self.tiers.read_durable(pack_id, 0, record.size)
        if old is None:
            return 0
        members, vouchers, parts, offset = [], [], [], 0
        for member, place in live:
            block = old[member.offset:member.offset + member.length]
            if checksum(block) != member.checksum:
                log.error("pack %016x: block %016x fails its checksum; left where it is", pack_id, member.block_id)
                continue
            members.append(member._replace(offset=offset))
            vouchers.append([Voucher(keys.packed(member.block_id), place)])
            parts.append(block)
            offset += member.length
        return len(await self._write(members, vouchers, b"".join(parts))) if members else 0
