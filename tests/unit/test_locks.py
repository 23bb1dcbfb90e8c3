"""The lock table (aifs.meta.locks) on the in-memory engine: POSIX byte ranges against a model
that keeps one lock type per byte and holder, flock semantics, and what goes with a file's
last close, a dead session and a new mount."""

from __future__ import annotations

from fcntl import F_RDLCK, F_UNLCK, F_WRLCK

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aifs.meta import keys
from aifs.meta.locks import FLOCK, POSIX, TO_END, LockRecord, LockTable, SessionGone
from aifs.meta.memory_kv import MemoryKV
from aifs.meta.sessions import Session

INO = 7
LAST_START, LONGEST = 15, 8
SPAN = LAST_START + LONGEST + 1  # the model's bytes: the last one stands for all beyond explicit ends
OWNERS = (11, 12, 13)


def posix(owner: int, type_: int, start: int = 0, end: int = TO_END, sid: int = 0, fh: int = 1,
          pid: int = 100) -> LockRecord:
    return LockRecord(POSIX, sid, owner, fh, pid, type_, start, end)


def flock(owner: int, type_: int, sid: int = 0, fh: int = 1) -> LockRecord:
    return LockRecord(FLOCK, sid, owner, fh, 0, type_)


@pytest.fixture
def table() -> LockTable:
    return LockTable(MemoryKV())


# -- POSIX ranges against a model --------------------------------------------

requests = st.lists(
    st.tuples(st.sampled_from(OWNERS), st.sampled_from((F_RDLCK, F_WRLCK, F_UNLCK)),
              st.integers(0, LAST_START), st.one_of(st.integers(1, LONGEST), st.none())),
    min_size=1, max_size=30)


def model_apply(model: dict[int, dict[int, int]], owner: int, type_: int, start: int, end: int) -> bool:
    """Apply to the model; False (and no change) when another owner holds a byte in the way."""
    covered = range(start, min(end, SPAN))
    if type_ != F_UNLCK:
        for other, held in model.items():
            if other != owner and any(b in held and F_WRLCK in (held[b], type_) for b in covered):
                return False
    for b in covered:
        if type_ == F_UNLCK:
            model[owner].pop(b, None)
        else:
            model[owner][b] = type_
    return True


def bytes_held(records: list[LockRecord]) -> dict[int, dict[int, int]]:
    held: dict[int, dict[int, int]] = {owner: {} for owner in OWNERS}
    for record in records:
        for b in range(record.start, min(record.end, SPAN)):
            assert b not in held[record.owner], f"{record} overlaps another lock of its owner"
            held[record.owner][b] = record.type
    return held


def assert_normalized(records: list[LockRecord]) -> None:
    """Locks of one owner and type that touch are one lock, as the kernel keeps them."""
    for a in records:
        for b in records:
            if a is not b and a.owner == b.owner and a.type == b.type:
                assert not a.touches(b), f"{a} and {b} should have merged"


@settings(max_examples=300, deadline=None, database=None)
@given(requests)
def test_posix_requests_match_a_byte_model(steps) -> None:
    table = LockTable(MemoryKV())
    model: dict[int, dict[int, int]] = {owner: {} for owner in OWNERS}
    for owner, type_, start, length in steps:
        end = TO_END if length is None else start + length
        request = posix(owner, type_, start, end)
        expected_grant = model_apply(model, owner, type_, start, end)
        probe = table.conflict(INO, request)
        conflict, changed = table.apply(INO, request)
        assert (conflict is None) == expected_grant, (request, table.locks(INO))
        assert probe == conflict, "F_GETLK reports the lock that SETLK meets"
        if conflict is not None:
            assert not changed
            assert conflict.owner != owner and conflict.overlaps(request)
            assert F_WRLCK in (conflict.type, type_)
        records = table.locks(INO)
        assert bytes_held(records) == model
        assert_normalized(records)


def test_unlocking_the_middle_splits_a_lock(table) -> None:
    table.apply(INO, posix(11, F_WRLCK, 0, 100))
    table.apply(INO, posix(11, F_UNLCK, 40, 60))
    assert [(r.start, r.end) for r in table.locks(INO)] == [(0, 40), (60, 100)]
    assert table.conflict(INO, posix(12, F_WRLCK, 40, 60)) is None
    assert table.conflict(INO, posix(12, F_RDLCK, 59, 61)).start == 60


def test_adjacent_locks_of_one_type_merge_and_others_stay_apart(table) -> None:
    table.apply(INO, posix(11, F_RDLCK, 0, 10))
    table.apply(INO, posix(11, F_RDLCK, 10, 20))
    table.apply(INO, posix(11, F_WRLCK, 20, 30))
    assert [(r.type, r.start, r.end) for r in table.locks(INO)] == [(F_RDLCK, 0, 20), (F_WRLCK, 20, 30)]


def test_an_upgrade_blocked_by_a_reader_changes_nothing(table) -> None:
    table.apply(INO, posix(11, F_RDLCK, 0, 10))
    table.apply(INO, posix(12, F_RDLCK, 5, 6))
    conflict, changed = table.apply(INO, posix(11, F_WRLCK, 0, 10))
    assert conflict.owner == 12 and not changed
    assert [r.type for r in table.locks(INO) if r.owner == 11] == [F_RDLCK]


def test_posix_and_flock_locks_do_not_conflict(table) -> None:
    table.apply(INO, posix(11, F_WRLCK))
    assert table.apply(INO, flock(12, F_WRLCK)) == (None, True)


def test_one_owner_number_on_two_nodes_is_two_holders(table) -> None:
    table.apply(INO, posix(11, F_WRLCK, sid=1))
    assert table.apply(INO, posix(11, F_WRLCK, sid=2))[0].sid == 1


def test_the_last_unlock_removes_the_inode_table(table) -> None:
    table.apply(INO, posix(11, F_WRLCK, 5, 9))
    table.apply(INO, posix(11, F_UNLCK))
    assert table.locks(INO) == []
    assert table._kv.get(keys.locks(INO)) is None


# -- flock ---------------------------------------------------------------------------

def test_flock_shared_and_exclusive(table) -> None:
    assert table.apply(INO, flock(11, F_RDLCK))[0] is None
    assert table.apply(INO, flock(12, F_RDLCK))[0] is None
    assert table.apply(INO, flock(13, F_WRLCK))[0].type == F_RDLCK
    table.apply(INO, flock(11, F_UNLCK))
    table.apply(INO, flock(12, F_UNLCK))
    assert table.apply(INO, flock(13, F_WRLCK))[0] is None


def test_a_refused_flock_conversion_drops_the_old_lock_as_linux_does(table) -> None:
    """Two holders of shared locks that both upgrade: the first to try loses its shared lock,
    so the second one's upgrade succeeds instead of both waiting for ever."""
    table.apply(INO, flock(11, F_RDLCK))
    table.apply(INO, flock(12, F_RDLCK))
    conflict, changed = table.apply(INO, flock(11, F_WRLCK))
    assert conflict.owner == 12 and changed
    assert [r.owner for r in table.locks(INO)] == [12]
    assert table.apply(INO, flock(12, F_WRLCK))[0] is None


def test_flock_again_of_the_same_type_keeps_one_lock(table) -> None:
    table.apply(INO, flock(11, F_WRLCK))
    table.apply(INO, flock(11, F_WRLCK))
    assert len(table.locks(INO)) == 1


# -- last close, dead sessions, a new mount --------------------------------------------

def test_the_last_close_of_a_file_drops_the_locks_taken_through_it(table) -> None:
    table.apply(INO, flock(11, F_WRLCK, sid=1, fh=5))
    table.apply(INO, posix(11, F_WRLCK, 0, 10, sid=1, fh=5))  # an open file description lock
    table.apply(INO, posix(12, F_WRLCK, 20, 30, sid=1, fh=6))
    table.apply(INO, posix(13, F_WRLCK, 40, 50, sid=2, fh=5))  # fh 5 of another node
    table.drop_file(INO, 1, 5)
    assert sorted((r.sid, r.fh) for r in table.locks(INO)) == [(1, 6), (2, 5)]


def test_a_one_node_mount_starts_with_no_locks(table) -> None:
    table.apply(INO, posix(11, F_WRLCK))
    table.apply(INO + 1, flock(11, F_WRLCK))
    table.clear()
    assert table.locks(INO) == [] and table.locks(INO + 1) == []


def shared_kv() -> MemoryKV:
    kv = MemoryKV()
    kv.shared = True
    return kv


def session(kv: MemoryKV, node: str) -> Session:
    return Session(kv, node, f"/mnt/{node}", "test", timeout_s=1.0, holding=list)


def test_a_shared_engine_refuses_locks_of_a_session_that_is_gone() -> None:
    kv = shared_kv()
    table = LockTable(kv)
    gone = session(kv, "a")
    gone.close()
    with pytest.raises(SessionGone):
        table.apply(INO, posix(11, F_WRLCK, sid=gone.sid))
    assert table.apply(INO, posix(11, F_UNLCK, sid=gone.sid)) == (None, True), "releasing needs no session"


def test_a_dead_sessions_locks_go_with_it_and_the_others_stay() -> None:
    kv = shared_kv()
    table = LockTable(kv)
    watcher, dead = session(kv, "a"), session(kv, "b")
    table.apply(INO, posix(11, F_WRLCK, 0, 10, sid=dead.sid))
    table.apply(INO, flock(11, F_RDLCK, sid=dead.sid))
    table.apply(INO, posix(11, F_WRLCK, 10, 20, sid=watcher.sid))
    table.apply(INO + 1, flock(12, F_WRLCK, sid=dead.sid))
    watcher.sweep(now_ns=0)
    assert [info.sid for info in watcher.sweep(now_ns=2_000_000_000)] == [dead.sid]
    assert [(r.sid, r.start) for r in table.locks(INO)] == [(watcher.sid, 10)]
    assert table.locks(INO + 1) == []
    assert table.apply(INO, posix(12, F_WRLCK, 0, 10, sid=watcher.sid))[0] is None
