"""Sessions of a shared volume: every mount registers itself, beats, and watches the others.

A session record (`S sid`) names its node, host, pid, mount point and version, and carries
a beat count that the mount raises every heartbeat. Liveness is judged by each watcher's
own clock (how long a record's beat has not moved), never by comparing clocks of two
nodes. A session whose beat stops for `session_timeout` is cleaned by whichever survivor
notices first: its record goes, and with it its open-file holds (`H ino sid`) and the
leases and file locks it held, so its open-unlinked files are freed, its duties taken over
and its locks granted to the waiting nodes.

A mount that finds its own record gone (it was paused past the timeout and declared dead)
registers again under a new id and holds its open files anew; its file locks are not taken
again, since other nodes may hold them by now.
"""

import logging
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import msgpack

from aifs.meta import keys
from aifs.meta.kv import Batch, Conflict, KVStore
from aifs.meta.locks import drop_session_locks
from aifs.meta.txn import Txn, retried

log = logging.getLogger(__name__)

_NEXT_SESSION = keys.counter(b"next_session")


class _Unregistered(Exception):
    """This session's record is gone: the other nodes declared it dead."""


@dataclass
class SessionInfo:
    """What `aifs status` shows of a mount of the volume."""

    sid: int
    node: str
    host: str
    pid: int
    mountpoint: str
    version: str
    started_ns: int
    beat: int = 0
    peer: str = ""  # HOST:PORT of its block server for the other nodes; "" when it serves none

    def encode(self) -> bytes:
        return msgpack.packb(asdict(self))

    @classmethod
    def decode(cls, data: bytes) -> "SessionInfo":
        return cls(**msgpack.unpackb(data))

    def describe(self) -> str:
        return f"session {self.sid} (node {self.node} on {self.host}, pid {self.pid}, {self.mountpoint})"


def list_sessions(kv: KVStore) -> list[SessionInfo]:
    return [SessionInfo.decode(value) for _, value in kv.scan(keys.SESSION)]


class Session:
    """This mount's session: register, beat, hold open files, and clean dead peers."""

    def __init__(self, kv: KVStore, node: str, mountpoint: str, version: str, timeout_s: float,
                 holding: Callable[[], Iterable[int]]) -> None:
        self._kv = kv
        self._timeout_ns = int(timeout_s * 1e9)
        self._holding = holding  # the inodes this mount has open, to hold again after re-registering
        self.info = SessionInfo(0, node, socket.gethostname(), os.getpid(), mountpoint, version,
                                time.time_ns())
        self._seen: dict[int, tuple[int, int]] = {}  # sid: (beat, monotonic ns it was first seen at)
        self.members: list[SessionInfo] = []  # the sessions the last sweep left
        self._register()

    @property
    def sid(self) -> int:
        return self.info.sid

    def _register(self) -> None:
        self.info.sid = self._kv.add(_NEXT_SESSION, 1)
        self.info.beat = 0
        batch = Batch()
        batch.expect(keys.session(self.sid), None)
        self._record = self.info.encode()
        batch.put(keys.session(self.sid), self._record)
        self._kv.commit(batch)

    # -- heartbeat ---------------------------------------------------------

    def beat(self) -> None:
        """Raise the beat; re-register (and hold every open file again) if the record is gone."""
        if not self._raise_beat():
            old = self.sid
            self._register()
            for ino in self._holding():
                self.hold(ino)
            log.error("session %d was declared dead by the other nodes (no heartbeat for too long); "
                      "registered again as session %d", old, self.sid)

    @retried
    def _raise_beat(self) -> bool:
        txn = Txn(self._kv)
        if txn.get(keys.session(self.sid)) is None:
            return False
        self.info.beat += 1
        record = self.info.encode()
        txn.batch.put(keys.session(self.sid), record)
        txn.batch.on_commit(lambda: setattr(self, "_record", record))
        txn.commit()
        return True

    def advertise(self, peer: str) -> None:
        """Tell the other nodes where this mount serves its blocks (written with the next beat,
        which this is)."""
        self.info.peer = peer
        self.beat()

    def close(self) -> None:
        """A clean unmount: the record and its holds go now, not after a timeout."""
        self._drop(self.sid, None)

    # -- open files --------------------------------------------------------

    def hold(self, ino: int) -> bytes | None:
        """Record that this mount has `ino` open. Returns the inode's record as the commit that
        holds it read it (what an open must see), or None when the inode no longer exists."""
        try:
            return self._hold(ino)
        except _Unregistered:  # declared dead meanwhile: registering again holds every open file
            self.beat()
            return self._hold(ino)

    @retried
    def _hold(self, ino: int) -> bytes | None:
        """A hold under a dead id would never be released, so the record is expected as this
        session last wrote it, without reading it; when that fails, it is read to tell a dead
        session (_Unregistered) from a stale expectation."""
        txn = Txn(self._kv)
        txn.batch.expect(keys.session(self.sid), self._record)
        record = txn.get(keys.inode(ino))
        if record is None:
            return None
        txn.batch.put(keys.holder(ino, self.sid), b"")
        try:
            txn.commit()
        except Conflict:
            if self._kv.get(keys.session(self.sid)) is None:
                raise _Unregistered from None
            raise
        return record

    def let_go(self, inos: Iterable[int]) -> None:
        """Give back the holds of these inodes, in one commit."""
        batch = Batch()
        for ino in inos:
            batch.delete(keys.holder(ino, self.sid))
        self._kv.commit(batch)

    # -- watching the others -----------------------------------------------

    def sweep(self, now_ns: int | None = None) -> list[SessionInfo]:
        """Clean the sessions whose beat has not moved for the timeout; returns them. The others
        stay in `members`, this one included."""
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        dead = []
        current = {}
        sessions = list_sessions(self._kv)
        for info in sessions:
            beat, since = self._seen.get(info.sid, (info.beat, now_ns))
            if beat != info.beat:
                since = now_ns
            current[info.sid] = (info.beat, since)
            if info.sid != self.sid and now_ns - since >= self._timeout_ns:
                if self._drop(info.sid, info):
                    log.warning("%s stopped heartbeating %.0f s ago; released its open files and leases",
                                info.describe(), (now_ns - since) / 1e9)
                    dead.append(info)
        self._seen = current
        self.members = [info for info in sessions if info not in dead]
        return dead

    @retried
    def _drop(self, sid: int, stale: SessionInfo | None) -> bool:
        """Remove a session, its holds and its file locks; with `stale`, only if its record is
        still that one (its beat did not move after all, and no other node cleaned it first)."""
        txn = Txn(self._kv)
        record = txn.get(keys.session(sid))
        if record is None or (stale is not None and SessionInfo.decode(record).beat != stale.beat):
            return False
        txn.batch.delete(keys.session(sid))
        suffix = keys.u64(sid)
        for key, _ in self._kv.scan(keys.HOLDER):
            if key.endswith(suffix) and len(key) == 17:
                txn.batch.delete(key)
        drop_session_locks(txn, sid)
        txn.commit()
        return True


@retried
def take_lease(kv: KVStore, name: bytes, sid: int) -> bool:
    """Whether session `sid` holds the lease `name` now: it already did, or the lease was free,
    or its holder's session is gone (dead and cleaned, or unmounted)."""
    txn = Txn(kv)
    holder = txn.get(keys.lease(name))
    if holder is not None:
        if keys.read_u64(holder) == sid:
            return True
        if txn.get(keys.session(keys.read_u64(holder))) is not None:
            return False
    txn.batch.put(keys.lease(name), keys.u64(sid))
    txn.commit()
    return True


def live_sessions(kv: KVStore, timeout_s: float, poll_s: float = 0.2) -> list[SessionInfo]:
    """The sessions whose beat moves within `timeout_s`: the nodes that have the volume mounted
    now. Waits that long only while some recorded session has not beaten yet."""
    first = {info.sid: info.beat for info in list_sessions(kv)}
    live: dict[int, SessionInfo] = {}
    deadline = time.monotonic() + timeout_s
    while len(live) < len(first) and time.monotonic() < deadline:
        time.sleep(poll_s)
        for info in list_sessions(kv):
            if first.get(info.sid, info.beat) != info.beat:
                live[info.sid] = info
    return list(live.values())
