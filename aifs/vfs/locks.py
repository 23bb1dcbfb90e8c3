"""The file lock requests of one mount: flock and POSIX locks on the volume's lock table
(aifs.meta.locks), with the waiting that F_SETLKW and a blocking flock ask for.

A waiting request tries again whenever the inode's locks change: at once for a change made on
this node, on the engine's push for a change made on another, and after a growing pause in any
case (a push may be lost; a dead holder's locks go when its session is cleaned). It ends with
EINTR when the kernel interrupts it (the waiting process got a signal or was killed), and with
ENOLCK when the mount stops. Each waiting request keeps one of the FUSE loop's request tasks,
so only so many may wait at once: one more fails with ENOLCK rather than leave no task to serve
the unlock that all of them wait for.

Before a holder's lock changes, what this node wrote to the file is stored, as close() stores
it, so that the node taking the lock next reads it.
"""

import errno
import fcntl
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from typing import Protocol

import trio

from aifs.errors import FsError
from aifs.meta import keys
from aifs.meta.kv import KVStore
from aifs.meta.locks import FLOCK, POSIX, TO_END, LockRecord, LockTable, SessionGone
from aifs.meta.sessions import Session
from aifs.meta.writestate import MetaWriteFailed

log = logging.getLogger(__name__)

FIRST_RETRY_S = 0.02
MAX_RETRY_S = 0.5
INTERRUPT_CHECK_S = 0.05  # how soon a waiting request notices that the kernel interrupted it

Interrupted = Callable[[], bool]
_FLOCK_TYPES = {fcntl.LOCK_SH: fcntl.F_RDLCK, fcntl.LOCK_EX: fcntl.F_WRLCK, fcntl.LOCK_UN: fcntl.F_UNLCK}


class ByteRange(Protocol):
    """A POSIX lock request as struct flock has it: a `length` of 0 reaches to the end."""

    type: int
    start: int
    length: int
    pid: int


class FileLocks:
    """Lock requests of this mount (the node of `session` on a shared volume, else the only one).

    `seal(ino)` stores what this node wrote to an open file; `max_waiting` bounds the requests
    that wait at once. It remembers which holders took locks here, so that the unlock every
    close() brings costs nothing for files that were never locked."""

    def __init__(self, kv: KVStore, session: Session | None, seal: Callable[[int], Awaitable[None]],
                 max_waiting: int) -> None:
        self._table = LockTable(kv)
        self._session = session
        self._seal = seal
        self._max_waiting = max_waiting
        self._waiting = 0
        self._changed: dict[int, trio.Event] = {}  # ino: set when its locks change
        self._holders: set[tuple[int, int, int]] = set()  # (kind, ino, owner) that took locks here
        self._files: set[int] = set()  # open files (fh) that locks were taken through
        self._sid = session.sid if session is not None else 0
        self._token: trio.lowlevel.TrioToken | None = None
        self._stopping = False
        if kv.shared:
            kv.subscribe(self._pushed, from_others=True)
        else:
            self._clear_stale()

    def _clear_stale(self) -> None:
        """On a one-node engine every lock in the table is left by a mount that ended."""
        try:
            self._table.clear()
        except MetaWriteFailed as e:
            log.warning("file locks left by the previous mount stay until the next mount: %s", e)

    # -- requests ----------------------------------------------------------

    def conflicting(self, ino: int, owner: int, lock: ByteRange) -> tuple[int, int, int, int] | None:
        """F_GETLK: (type, start, length, pid) of a lock in the way of `lock`, or None. A lock
        held on another node reports pid 0: its process is not one this node's kernel knows."""
        sid = self._sid_now()
        found = self._table.conflict(ino, replace(self._posix(0, owner, lock), sid=sid))
        if found is None:
            return None
        length = 0 if found.end == TO_END else found.end - found.start
        return found.type, found.start, length, found.pid if found.sid == sid else 0

    async def posix(self, ino: int, fh: int, owner: int, lock: ByteRange, wait: Interrupted | None) -> None:
        """F_SETLK, or F_SETLKW when given `wait`: what tells whether the kernel gave up waiting."""
        await self._request(ino, self._posix(fh, owner, lock), wait)

    async def flock(self, ino: int, fh: int, owner: int, op: int, interrupted: Interrupted) -> None:
        """flock(2): LOCK_SH, LOCK_EX or LOCK_UN, waiting unless LOCK_NB is in `op`."""
        request = LockRecord(FLOCK, 0, owner, fh, 0, _FLOCK_TYPES[op & ~fcntl.LOCK_NB])
        await self._request(ino, request, None if op & fcntl.LOCK_NB else interrupted)

    def posix_held(self, ino: int) -> bool:
        """Whether a process here holds POSIX locks on `ino`: the close of any descriptor of
        the file must then reach the mount, which releases that process's locks."""
        return any(kind == POSIX and held == ino for kind, held, _ in self._holders)

    def closed(self, ino: int, fh: int) -> None:
        """The last close of open file `fh`: locks taken through it and not released go now."""
        if fh in self._files:
            self._files.discard(fh)
            self._table.drop_file(ino, self._sid_now(), fh)
            self._wake([ino])

    def stop(self) -> None:
        """The mount stops serving: waiting requests end (ENOLCK) instead of holding it up."""
        self._stopping = True
        self._wake(list(self._changed))

    @staticmethod
    def _posix(fh: int, owner: int, lock: ByteRange) -> LockRecord:
        end = TO_END if lock.length == 0 else lock.start + lock.length
        return LockRecord(POSIX, 0, owner, fh, lock.pid, lock.type, lock.start, end)

    async def _request(self, ino: int, request: LockRecord, wait: Interrupted | None) -> None:
        """Grant `request`, waiting for it as long as `wait` says the kernel still waits; EAGAIN
        at once without `wait`."""
        holder = (request.kind, ino, request.owner)
        if holder not in self._holders and request.type == fcntl.F_UNLCK:
            return
        if holder in self._holders:
            await self._store_writes(ino)
        delay = FIRST_RETRY_S
        waiting = False
        try:
            while True:
                changed = self._changed.setdefault(ino, trio.Event())
                conflict = self._apply(ino, request)
                if conflict is None:
                    return
                if wait is None:
                    raise FsError(errno.EAGAIN, f"inode {ino} is locked by another holder")
                if not waiting:
                    self._begin_waiting(ino)
                    waiting = True
                await self._wait(changed, delay, wait)
                delay = min(2 * delay, MAX_RETRY_S)
        finally:
            if waiting:
                self._waiting -= 1

    async def _store_writes(self, ino: int) -> None:
        """Store what this node wrote to the file; if that fails, the lock changes all the same
        (the writes stay buffered, and the file's close reports the failure)."""
        try:
            await self._seal(ino)
        except FsError as e:
            log.warning("what was written to inode %d could not be stored before its lock changed: %s",
                        ino, e)

    def _apply(self, ino: int, request: LockRecord) -> LockRecord | None:
        """One attempt on the table, under this node's session id (registering it again if the
        other nodes declared it dead); the lock in the way, or None once granted."""
        try:
            conflict, changed = self._table.apply(ino, replace(request, sid=self._sid_now()))
        except SessionGone:
            self._session.beat()
            conflict, changed = self._table.apply(ino, replace(request, sid=self._sid_now()))
        if changed:
            self._wake([ino])
        holder = (request.kind, ino, request.owner)
        if conflict is None and request.type != fcntl.F_UNLCK:
            self._holders.add(holder)
            self._files.add(request.fh)
        elif request.type == fcntl.F_UNLCK and (request.start, request.end) == (0, TO_END):
            self._holders.discard(holder)
        return conflict

    def _sid_now(self) -> int:
        """This node's session id. When it changed, the old session was declared dead and its
        locks were released for other nodes to take: the processes here no longer hold them."""
        sid = self._session.sid if self._session is not None else 0
        if sid != self._sid and self._holders:
            log.error("the other nodes declared session %d dead and released the file locks it held; "
                      "processes on this node that held %d lock(s) no longer do",
                      self._sid, len(self._holders))
            self._holders.clear()
            self._files.clear()
        self._sid = sid
        return sid

    # -- waiting -------------------------------------------------------------

    def _begin_waiting(self, ino: int) -> None:
        if self._waiting >= self._max_waiting:
            log.warning("a lock request on inode %d failed with ENOLCK: %d requests wait for locks "
                        "already, as many as this mount lets wait ([fuse] max_tasks / 2)",
                        ino, self._waiting)
            raise FsError(errno.ENOLCK, f"{self._waiting} lock requests are waiting already")
        self._waiting += 1

    async def _wait(self, changed: trio.Event, delay: float, interrupted: Interrupted) -> None:
        """Until the inode's locks change or `delay` passes."""
        self._token = trio.lowlevel.current_trio_token()
        with trio.move_on_after(delay):
            while not changed.is_set():
                if interrupted():
                    raise FsError(errno.EINTR, "the waiting process was interrupted")
                if self._stopping:
                    raise FsError(errno.ENOLCK, "the mount is stopping")
                with trio.move_on_after(INTERRUPT_CHECK_S):
                    await changed.wait()

    def _wake(self, inos: Iterable[int]) -> None:
        for ino in inos:
            event = self._changed.pop(ino, None)
            if event is not None:
                event.set()

    def _pushed(self, changed: list[bytes] | None) -> None:
        """Other nodes' changes pushed by the engine, on its listener thread: waiters on inodes
        whose locks changed try again (all of them when pushes were lost)."""
        token = self._token
        if token is None:
            return
        if changed is None:
            inos = None
        else:
            inos = [keys.read_u64(key, 1) for key in changed if key[:1] == keys.LOCKS]
            if not inos:
                return
        try:
            token.run_sync_soon(lambda: self._wake(list(self._changed) if inos is None else inos))
        except trio.RunFinishedError:
            pass
