"""A mount's lock requests (aifs.vfs.locks) on the in-memory engine, under trio: waiting until
the holder lets go, here or on another node, and the ways a wait ends early."""

from __future__ import annotations

import errno
import fcntl
import threading
from typing import NamedTuple

import pytest
import trio
import trio.testing

from aifs.errors import FsError
from aifs.meta import keys
from aifs.meta.memory_kv import MemoryKV
from aifs.meta.sessions import Session
from aifs.vfs import locks as vfs_locks
from aifs.vfs.locks import FileLocks

INO = 5
BOUND_S = 10.0  # every test ends within this, whatever goes wrong


class Lock(NamedTuple):
    type: int
    start: int
    length: int
    pid: int


WHOLE_WRITE = Lock(fcntl.F_WRLCK, 0, 0, 100)
WHOLE_UNLOCK = Lock(fcntl.F_UNLCK, 0, 0, 0)


class PushingKV(MemoryKV):
    """An in-memory engine shared by several nodes, with the change pushes of a network one."""

    shared = True

    def __init__(self) -> None:
        super().__init__()
        self.listeners = []

    def subscribe(self, listener, from_others: bool = False) -> None:
        assert from_others, "a node wakes its own waiters itself"
        self.listeners.append(listener)

    def push(self, changed: list[bytes] | None) -> None:
        for listener in self.listeners:
            listener(changed)


class Seals:
    def __init__(self) -> None:
        self.inodes: list[int] = []

    async def __call__(self, ino: int) -> None:
        self.inodes.append(ino)


def never() -> bool:
    return False


def one_node(max_waiting: int = 8) -> tuple[FileLocks, Seals]:
    seals = Seals()
    return FileLocks(MemoryKV(), None, seals, max_waiting), seals


def run(test) -> None:
    async def bounded() -> None:
        with trio.fail_after(BOUND_S):
            await test()

    trio.run(bounded)


async def errno_of(request) -> int | None:
    try:
        await request
    except FsError as e:
        return e.errno
    return None


def test_a_waiting_request_gets_the_lock_when_its_holder_unlocks() -> None:
    locks, _ = one_node()
    order = []

    async def waiter() -> None:
        await locks.posix(INO, 2, owner=22, lock=WHOLE_WRITE, wait=never)
        order.append("granted")

    async def test() -> None:
        await locks.posix(INO, 1, owner=11, lock=WHOLE_WRITE, wait=None)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            assert locks._waiting == 1 and order == []
            order.append("unlocked")
            await locks.posix(INO, 1, owner=11, lock=WHOLE_UNLOCK, wait=None)
        assert order == ["unlocked", "granted"]
        assert locks.conflicting(INO, 11, WHOLE_WRITE)[3] == 100, "the holder's pid, on this node"

    run(test)


def test_requests_that_do_not_wait_fail_at_once() -> None:
    locks, _ = one_node()

    async def test() -> None:
        await locks.posix(INO, 1, owner=11, lock=WHOLE_WRITE, wait=None)
        await locks.flock(INO, 1, owner=11, op=fcntl.LOCK_EX, interrupted=never)
        assert await errno_of(locks.posix(INO, 2, 22, WHOLE_WRITE, None)) == errno.EAGAIN
        refused = await errno_of(locks.flock(INO, 2, 22, fcntl.LOCK_SH | fcntl.LOCK_NB, never))
        assert refused == errno.EWOULDBLOCK

    run(test)


def test_an_interrupted_wait_ends_with_eintr_and_takes_nothing() -> None:
    locks, _ = one_node()
    interrupted = threading.Event()

    async def test() -> None:
        await locks.flock(INO, 1, owner=11, op=fcntl.LOCK_EX, interrupted=never)
        async with trio.open_nursery() as nursery:
            outcome = []

            async def waiter() -> None:
                outcome.append(await errno_of(locks.flock(INO, 2, 22, fcntl.LOCK_EX, interrupted.is_set)))

            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            interrupted.set()
        assert outcome == [errno.EINTR] and locks._waiting == 0
        await locks.flock(INO, 1, owner=11, op=fcntl.LOCK_UN, interrupted=never)
        assert locks._table.locks(INO) == []

    run(test)


def test_waits_beyond_the_limit_fail_with_enolck_and_stop_ends_the_others() -> None:
    locks, _ = one_node(max_waiting=2)

    async def test() -> None:
        await locks.posix(INO, 1, owner=11, lock=WHOLE_WRITE, wait=None)
        outcomes = []

        async def waiter(owner: int) -> None:
            outcomes.append(await errno_of(locks.posix(INO, owner, owner, WHOLE_WRITE, never)))

        async with trio.open_nursery() as nursery:
            for owner in (21, 22, 23):
                nursery.start_soon(waiter, owner)
                await trio.testing.wait_all_tasks_blocked()
            assert outcomes == [errno.ENOLCK]
            locks.stop()
        assert outcomes == [errno.ENOLCK] * 3

    run(test)


def test_a_change_pushed_from_another_node_wakes_a_waiter(monkeypatch) -> None:
    """With retries put off for longer than the test may run, only the push can wake it."""
    monkeypatch.setattr(vfs_locks, "FIRST_RETRY_S", 3600.0)
    kv = PushingKV()
    nodes = [FileLocks(kv, Session(kv, name, "/mnt", "test", 30.0, list), Seals(), 8) for name in "ab"]

    async def test() -> None:
        await nodes[0].posix(INO, 1, owner=11, lock=WHOLE_WRITE, wait=None)
        assert nodes[1].conflicting(INO, 11, WHOLE_WRITE)[3] == 0, "another node's pid means nothing here"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(nodes[1].posix, INO, 1, 11, WHOLE_WRITE, never)
            await trio.testing.wait_all_tasks_blocked()
            await nodes[0].posix(INO, 1, owner=11, lock=WHOLE_UNLOCK, wait=None)
            await trio.to_thread.run_sync(kv.push, [keys.inode(INO), keys.locks(INO)])
        assert [r.sid for r in nodes[1]._table.locks(INO)] == [nodes[1]._session.sid]

    run(test)


def test_a_holder_stores_its_writes_before_its_lock_changes_and_files_never_locked_cost_nothing() -> None:
    locks, seals = one_node()

    async def test() -> None:
        await locks.posix(INO + 1, 1, owner=11, lock=WHOLE_UNLOCK, wait=None)  # close() of an unlocked file
        assert seals.inodes == []
        await locks.posix(INO, 1, owner=11, lock=WHOLE_WRITE, wait=None)
        assert seals.inodes == []
        await locks.posix(INO, 1, owner=11, lock=WHOLE_UNLOCK, wait=None)
        assert seals.inodes == [INO]

    run(test)


def test_an_unlock_goes_through_when_the_writes_cannot_be_stored(caplog) -> None:
    async def full_disk(ino: int) -> None:
        raise FsError(errno.ENOSPC, "the staging area is full")

    locks = FileLocks(MemoryKV(), None, full_disk, 8)

    async def test() -> None:
        await locks.flock(INO, 1, owner=11, op=fcntl.LOCK_EX, interrupted=never)
        await locks.flock(INO, 1, owner=11, op=fcntl.LOCK_UN, interrupted=never)
        assert locks._table.locks(INO) == []

    run(test)
    assert "could not be stored before its lock changed" in caplog.text


def test_the_last_close_releases_open_file_locks_and_wakes_their_waiters() -> None:
    locks, _ = one_node()

    async def test() -> None:
        ofd_owner = 99  # an open file description lock: owned by the file, not a process
        await locks.posix(INO, 7, owner=ofd_owner, lock=WHOLE_WRITE, wait=None)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(locks.posix, INO, 8, 22, WHOLE_WRITE, never)
            await trio.testing.wait_all_tasks_blocked()
            locks.closed(INO, 7)
        assert [r.owner for r in locks._table.locks(INO)] == [22]

    run(test)


def test_a_node_declared_dead_locks_under_its_new_session_and_says_the_old_locks_are_gone(caplog) -> None:
    kv = PushingKV()
    node = Session(kv, "a", "/mnt", "test", 30.0, list)
    locks = FileLocks(kv, node, Seals(), 8)

    async def test() -> None:
        await locks.posix(INO, 1, owner=11, lock=WHOLE_WRITE, wait=None)
        old = node.sid
        Session(kv, "b", "/mnt", "test", 30.0, list)._drop(old, None)  # what a peer's sweep does
        await locks.posix(INO + 1, 1, owner=11, lock=WHOLE_WRITE, wait=None)
        assert node.sid != old
        assert [r.sid for r in locks._table.locks(INO + 1)] == [node.sid]
        assert locks._table.locks(INO) == []

    run(test)
    assert "declared session" in caplog.text and "no longer do" in caplog.text


@pytest.mark.parametrize("op", [fcntl.LOCK_SH, fcntl.LOCK_EX])
def test_flock_unlock_after_a_lock_leaves_nothing(op) -> None:
    locks, _ = one_node()

    async def test() -> None:
        await locks.flock(INO, 1, owner=11, op=op, interrupted=never)
        await locks.flock(INO, 1, owner=11, op=fcntl.LOCK_UN, interrupted=never)
        assert locks._table.locks(INO) == []

    run(test)
