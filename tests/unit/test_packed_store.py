"""How many requests reading packed blocks costs: in order, a pack is fetched about once
(and the next one ahead of its reader); shuffled, each read costs at most one ranged read,
until readers waiting for their bytes have jumped about in a pack, which is then fetched whole
and handed up.
The durable tier is a real local object store that counts the reads it serves."""

import os
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from aifs.meta.packs import PackMember, PackRecord, PackSlot
from aifs.tiers.objstore import LocalObjectStore
from aifs.tiers.packed import PackedStore

PACKS = 6
FIRST_PACK = 1_000_000
MEMBERS = 100
SIZE = 2048


class CountingStore(LocalObjectStore):
    """The local object store, counting the reads and bytes it serves."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, 1 << 30)
        self.reads_of: Counter[int] = Counter()
        self.bytes_read = 0
        self._count_lock = threading.Lock()

    def get_range(self, block_id: int, offset: int, length: int) -> bytes | None:
        data = super().get_range(block_id, offset, length)
        with self._count_lock:
            self.reads_of[block_id] += 1
            self.bytes_read += len(data or b"")
        return data

    @property
    def reads(self) -> int:
        return self.reads_of.total()


class Packs:
    """The pack index as the metadata engine answers it, held in dicts."""

    def __init__(self) -> None:
        self.records: dict[int, PackRecord] = {}
        self.slots: dict[int, PackSlot] = {}

    def slot_of(self, block_id: int) -> PackSlot | None:
        return self.slots.get(block_id)

    def pack_record(self, pack_id: int) -> PackRecord | None:
        return self.records.get(pack_id)

    def next_pack(self, pack_id: int) -> int | None:
        return min((p for p in self.records if p > pack_id), default=None)

    def packed_blocks(self) -> dict[int, PackSlot]:
        return dict(self.slots)

    def pack_ids(self) -> set[int]:
        return set(self.records)


@pytest.fixture
def packed(tmp_path: Path) -> tuple[PackedStore, CountingStore, dict[int, bytes]]:
    """PACKS packs of MEMBERS blocks of SIZE bytes, block ids in pack order."""
    inner, index, blocks = CountingStore(tmp_path), Packs(), {}
    for p in range(PACKS):
        pack_id = FIRST_PACK + p
        members = []
        for m in range(MEMBERS):
            block_id = p * MEMBERS + m
            blocks[block_id] = os.urandom(SIZE)
            members.append(PackMember(block_id, m * SIZE, SIZE, 0))
            index.slots[block_id] = PackSlot(pack_id, m * SIZE, SIZE)
        inner.put(pack_id, b"".join(blocks[m.block_id] for m in members))
        index.records[pack_id] = PackRecord(MEMBERS * SIZE, members, 0)
    store = PackedStore(inner, index)
    yield store, inner, blocks
    store.close()


def test_an_in_order_reader_fetches_each_pack_once(packed) -> None:
    store, inner, blocks = packed
    order = sorted(blocks)
    for block_id in order[:MEMBERS]:
        assert store.get(block_id) == blocks[block_id]
    deadline = time.monotonic() + 10
    while inner.reads_of[FIRST_PACK + 1] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert inner.reads_of[FIRST_PACK + 1] == 1  # fetched ahead of its first read, in the background
    for block_id in order[MEMBERS:]:
        assert store.get(block_id) == blocks[block_id]
    assert inner.reads <= PACKS + 2  # two ranged reads before the first pack's streak starts
    assert store.fetched_ahead == PACKS


def test_parallel_readers_a_little_out_of_order_fetch_each_pack_about_once(packed) -> None:
    """Reads in path order, each shuffled among its neighbours as 8 workers dealt samples
    round-robin deliver them."""
    store, inner, blocks = packed
    order = sorted(blocks)
    rng = random.Random(5)
    for i in range(0, len(order), 8):
        window = order[i:i + 8]
        rng.shuffle(window)
        order[i:i + 8] = window
    for block_id in order:
        assert store.get(block_id) == blocks[block_id]
    assert inner.reads_of[FIRST_PACK] <= 2 * 8 + 1  # ranged reads before the streak starts, then the rest
    assert all(inner.reads_of[FIRST_PACK + p] == 1 for p in range(1, PACKS))  # each fetched ahead whole


def test_a_shuffled_reader_costs_at_most_one_ranged_read_each(packed) -> None:
    store, inner, blocks = packed
    order = sorted(blocks)
    random.Random(7).shuffle(order)
    for block_id in order:
        assert store.get(block_id) == blocks[block_id]
    assert inner.reads <= len(order)
    assert inner.bytes_read <= 1.5 * len(order) * SIZE  # no pack fetched ahead that is not read


def test_eight_threads_read_the_right_bytes(packed) -> None:
    store, _, blocks = packed
    order = sorted(blocks)
    with ThreadPoolExecutor(8) as pool:
        for share in pool.map(lambda k: [(b, store.get(b)) for b in order[k::8]], range(8)):
            assert all(data == blocks[b] for b, data in share)


def test_a_next_pack_gone_fails_only_the_reads_of_it(packed) -> None:
    store, inner, blocks = packed
    first = sorted(blocks)[:MEMBERS]
    inner.delete(FIRST_PACK + 1)
    for block_id in first:
        assert store.get(block_id) == blocks[block_id]
    assert store.get(MEMBERS) is None
    assert store.get(2 * MEMBERS) == blocks[2 * MEMBERS]


def test_members_of_a_held_pack_are_answered_without_a_lookup_or_a_read(packed) -> None:
    store, inner, blocks = packed
    order = sorted(blocks)
    assert store.get_held(order[0], 0, None) is None  # nothing held yet
    for block_id in order[:MEMBERS // 2]:
        assert store.get(block_id) == blocks[block_id]
    # A held member needs no metadata from here on, nor a read of its pack. (The packs after
    # it may still be on their way in, fetched ahead in the background.)
    reads, store.index.slots = inner.reads_of[FIRST_PACK], {}
    rest = order[MEMBERS // 2:MEMBERS]
    assert [store.get_held(b, 0, None) for b in rest] == [blocks[b] for b in rest]
    assert store.get_held(rest[0], 100, 50) == blocks[rest[0]][100:150]
    assert inner.reads_of[FIRST_PACK] == reads
    store.delete_many([FIRST_PACK])  # a pack deleted: its bytes are no longer held
    assert store.get_held(rest[-1], 0, None) is None


def test_a_pack_readers_wait_for_and_jump_about_in_hands_its_live_members_up(packed) -> None:
    store, inner, blocks = packed
    handed: dict[int, tuple[bytes, int]] = {}
    got = threading.Event()

    def sink(members):
        handed.update((block_id, (data, checksum)) for block_id, data, checksum in members)
        got.set()

    store.on_promoted(sink)
    retired = MEMBERS + 50
    del store.index.slots[retired]  # no longer in the pack: not handed up
    for m in (70, 10, 90):  # reads ahead, in an order known in advance: they fetch what they need
        assert store.get(MEMBERS + m) == blocks[MEMBERS + m]
    for m in (40, 20):  # readers waiting, jumping about: on the second jump the pack goes up
        assert not got.is_set()
        assert store.get(MEMBERS + m, demand=True) == blocks[MEMBERS + m]
    assert got.wait(10)
    assert sorted(handed) == [b for b in range(MEMBERS, 2 * MEMBERS) if b != retired]
    assert all(data == blocks[b] for b, (data, _) in handed.items())
    assert inner.reads_of[FIRST_PACK + 1] == 6  # five ranged reads, then the pack whole
