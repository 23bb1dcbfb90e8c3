"""Packs: small blocks uploaded together as one durable object (docs/packing.md).

A block keeps its id for good; packing only changes where its durable copy lives. `M`
keys map a packed block to its pack and offset, and an `A` key records each pack: its
size, its members in order with their checksums, and how many of their bytes are dead.
A member retired from its file stays in the pack until garbage collection settles it;
the pack itself becomes garbage once all its members have.
"""

from collections.abc import Iterable
from typing import NamedTuple

import msgpack

from aifs.meta import keys
from aifs.meta.kv import Batch, KVStore
from aifs.meta.queues import due_in
from aifs.meta.txn import Txn, retried


class PackMember(NamedTuple):
    block_id: int
    offset: int
    length: int
    checksum: int


class Voucher(NamedTuple):
    """A key that holds `value` (None: is absent) for as long as a block lives where it was."""

    key: bytes
    value: bytes | None


class PackSlot(NamedTuple):
    """Where a packed block's bytes are: `length` bytes at `offset` of object `pack_id`."""

    pack_id: int
    offset: int
    length: int


class PackRecord(NamedTuple):
    """A pack's record. While its object is being put it is `unfinished` (naming the node
    putting it), so a crash never leaves an object nothing in the metadata accounts for."""

    size: int
    members: list[PackMember]
    dead_bytes: int
    unfinished: bytes | None = None

    def encode(self) -> bytes:
        return msgpack.packb([self.size, [list(m) for m in self.members], self.dead_bytes, self.unfinished])

    @classmethod
    def decode(cls, data: bytes) -> "PackRecord":
        size, members, dead, unfinished = msgpack.unpackb(data)
        return cls(size, [PackMember(*m) for m in members], dead, unfinished)


def encode_slot(slot: PackSlot) -> bytes:
    return keys.u64(slot.pack_id) + keys.u64(slot.offset) + keys.u64(slot.length)


def decode_slot(value: bytes) -> PackSlot:
    return PackSlot(keys.read_u64(value), keys.read_u64(value, 8), keys.read_u64(value, 16))


def pack_ids(kv: KVStore) -> set[int]:
    return {keys.read_u64(key, 1) for key, _ in kv.scan(keys.PACK)}


def packed_blocks(kv: KVStore) -> dict[int, PackSlot]:
    """Every packed block and where it lives (fsck, gc)."""
    return {keys.read_u64(key, 1): decode_slot(value) for key, value in kv.scan(keys.PACKED)}


class PackOps:
    """Mixed into MetaEngine; needs `kv`, `node`, `block_ids` and `garbage_grace_ns`."""

    def slot_of(self, block_id: int) -> PackSlot | None:
        """Where the durable copy of a packed block is; None for a block stored on its own.
        Safe on any thread: the cold tier asks it from its own."""
        value = self.kv.get(keys.packed(block_id))
        return None if value is None else decode_slot(value)

    def packed_blocks(self) -> dict[int, PackSlot]:
        return packed_blocks(self.kv)

    def pack_ids(self) -> set[int]:
        return pack_ids(self.kv)

    def pack_record(self, pack_id: int) -> PackRecord | None:
        value = self.kv.get(keys.pack(pack_id))
        return None if value is None else PackRecord.decode(value)

    def next_pack(self, pack_id: int) -> int | None:
        """The first pack put after `pack_id`. Pack ids are taken in upload order, which is
        close order, so this is where a reader going through a data set in order goes next."""
        for key, value in self.kv.scan(keys.PACK, start=keys.pack(pack_id + 1)):
            if not PackRecord.decode(value).unfinished:
                return keys.read_u64(key, 1)
        return None

    @property
    def _putter(self) -> bytes:
        """How this node names itself in the records of the packs it is putting."""
        return self.node or b"-"

    def new_pack(self) -> int:
        """A pack id, recorded as unfinished by this node before its object is put."""
        pack_id = self.block_ids.next()
        batch = Batch()
        batch.put(keys.pack(pack_id), PackRecord(0, [], 0, self._putter).encode())
        self.kv.commit(batch)
        return pack_id

    @retried
    def abandon_packs(self, pack_ids: Iterable[int]) -> None:
        """Unfinished packs whose objects will never be recorded: queued as garbage (their
        objects, if put at all, are deleted after the grace period)."""
        txn = Txn(self.kv)
        for pack_id in pack_ids:
            self._retire_pack(txn, pack_id)
        txn.commit()

    def unfinished_packs(self) -> list[int]:
        """This node's packs whose objects were being put when it stopped."""
        return [pack_id for pack_id, node in self._unfinished().items() if node == self._putter]

    def unfinished_elsewhere(self) -> dict[int, str]:
        """The packs other nodes are putting: pack id -> node id."""
        return {pack_id: node.decode() for pack_id, node in self._unfinished().items() if node != self._putter}

    def _unfinished(self) -> dict[int, bytes]:
        """Every pack being put, with the node putting it (one scan of the pack records)."""
        return {keys.read_u64(key, 1): unfinished for key, value in self.kv.scan(keys.PACK)
                if (unfinished := PackRecord.decode(value).unfinished)}

    @retried
    def abandon_elsewhere(self, packs: dict[int, str]) -> list[int]:
        """Abandon packs that nodes now gone were putting (pack id -> node id), those still
        unfinished by that node: one that came back and recorded its pack keeps it. Returns
        the packs abandoned."""
        txn = Txn(self.kv)
        abandoned = [pack_id for pack_id, value in zip(packs, txn.multi_get([keys.pack(p) for p in packs]))
                     if value is not None and PackRecord.decode(value).unfinished == packs[pack_id].encode()]
        for pack_id in abandoned:
            self._retire_pack(txn, pack_id)
        txn.commit()
        return abandoned

    def record_pack(self, txn: Txn, pack_id: int, members: list[PackMember]) -> bool:
        """Within an upload commit: the pack and where each member lives. A member whose
        upload record and garbage record are both gone was already collected, so its
        bytes are dead from the start; a member retired but not collected yet is recorded,
        and settled when it is collected. False, recording nothing, when the pack is no longer
        this node's to record (see _still_putting)."""
        if not self._still_putting(txn, pack_id):
            return False
        ids = [m.block_id for m in members]
        queued = txn.multi_get([keys.upload(b) for b in ids] + [keys.garbage(b) for b in ids])
        live = [u is not None or g is not None for u, g in zip(queued[:len(ids)], queued[len(ids):])]
        self._put_pack(txn, pack_id, members, live)
        return True

    def _still_putting(self, txn: Txn, pack_id: int) -> bool:
        """Whether the pack is still recorded as being put by this node. The other nodes
        abandon the packs of a node they take for dead (no heartbeat for the session timeout);
        if it was only cut off and comes back, its object is garbage already."""
        value = txn.get(keys.pack(pack_id))
        return value is not None and PackRecord.decode(value).unfinished == self._putter

    @retried
    def repack(self, pack_id: int, members: list[PackMember], vouchers: list[list[Voucher]]) -> list[PackMember]:
        """Record a pack built from blocks already durable elsewhere: stored on their own
        (`aifs pack`) or in a pack mostly dead (garbage collection). A member is moved in
        only while every key of its vouchers still holds the value it had when the pack was
        built (its block ref; its old place); its old copy is queued for deletion: an object
        of its own after the grace period, or its bytes in the old pack. Returns the members
        moved: none when the pack is no longer this node's to record."""
        txn = Txn(self.kv)
        if not self._still_putting(txn, pack_id):
            return []
        flat = [v for member_vouchers in vouchers for v in member_vouchers]
        found = iter(txn.multi_get([v.key for v in flat]))
        live = [all(next(found) == v.value for v in member_vouchers) for member_vouchers in vouchers]
        old_slots = txn.multi_get([keys.packed(m.block_id) for m in members])
        dying: dict[int, int] = {}
        for member, alive, old in zip(members, live, old_slots):
            if not alive:
                continue
            if old is None:
                txn.batch.put(keys.superseded(member.block_id), msgpack.packb(txn.now + self.garbage_grace_ns))
            else:
                slot = decode_slot(old)
                dying[slot.pack_id] = dying.get(slot.pack_id, 0) + slot.length
        self._put_pack(txn, pack_id, members, live)
        self._add_dead(txn, dying)
        txn.commit()
        return [m for m, alive in zip(members, live) if alive]

    def _put_pack(self, txn: Txn, pack_id: int, members: list[PackMember], live: list[bool]) -> None:
        """The pack's record and the places of its live members; a pack with none is garbage."""
        for member, alive in zip(members, live):
            if alive:
                txn.batch.put(keys.packed(member.block_id),
                              encode_slot(PackSlot(pack_id, member.offset, member.length)))
        size = max((m.offset + m.length for m in members), default=0)
        dead = size - sum(m.length for m, alive in zip(members, live) if alive)
        if dead == size:
            self._retire_pack(txn, pack_id)
        else:
            txn.batch.put(keys.pack(pack_id), PackRecord(size, members, dead).encode())

    @retried
    def settle_packed(self, block_ids: Iterable[int]) -> list[int]:
        """Before collecting `block_ids`: take the packed ones out of their packs, and queue each
        pack all of whose bytes are then dead as garbage itself. Returns the packs left more
        than half dead, whose live members are worth packing anew."""
        block_ids = list(block_ids)
        txn = Txn(self.kv)
        found = txn.multi_get([keys.packed(b) for b in block_ids])
        dying: dict[int, int] = {}
        for block_id, value in zip(block_ids, found):
            if value is not None:
                slot = decode_slot(value)
                dying[slot.pack_id] = dying.get(slot.pack_id, 0) + slot.length
                txn.batch.delete(keys.packed(block_id))
        if not dying:
            return []
        sparse = self._add_dead(txn, dying)
        txn.commit()
        return sparse

    def _add_dead(self, txn: Txn, dying: dict[int, int]) -> list[int]:
        """Count bytes of packs as dead; retire packs left with none alive. Returns the packs
        left more than half dead."""
        sparse = []
        for pack_id, value in zip(dying, txn.multi_get([keys.pack(p) for p in dying])):
            if value is None:
                continue
            record = PackRecord.decode(value)
            record = record._replace(dead_bytes=record.dead_bytes + dying[pack_id])
            if record.dead_bytes >= record.size:
                self._retire_pack(txn, pack_id)
                continue
            txn.batch.put(keys.pack(pack_id), record.encode())
            if _more_than_half_dead(record):
                sparse.append(pack_id)
        return sparse

    def sparse_packs(self) -> list[int]:
        """Every pack more than half of whose bytes are dead (one scan of the pack records):
        what a restart, or a compaction that failed, left to pack anew."""
        return [keys.read_u64(key, 1) for key, value in self.kv.scan(keys.PACK)
                if _more_than_half_dead(PackRecord.decode(value))]

    def superseded_due(self, limit: int = 1024, now_ns: int | None = None) -> list[int]:
        """Blocks whose objects of their own may go now: their bytes are in a pack."""
        return due_in(self.kv, keys.SUPERSEDED, limit, now_ns)

    def superseded_done(self, block_ids: list[int]) -> None:
        batch = Batch()
        for block_id in block_ids:
            batch.delete(keys.superseded(block_id))
        self.kv.commit(batch)

    def _retire_pack(self, txn: Txn, pack_id: int) -> None:
        txn.batch.delete(keys.pack(pack_id))
        txn.batch.put(keys.garbage(pack_id), msgpack.packb(txn.now + self.garbage_grace_ns))


def _more_than_half_dead(record: PackRecord) -> bool:
    """Worth packing anew: a compaction then at least halves the pack's bytes."""
    return 2 * record.dead_bytes > record.size
