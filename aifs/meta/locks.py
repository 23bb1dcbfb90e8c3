"""File locks kept in the metadata engine, so that every node of a volume honours them.

Two independent kinds share one table per inode (`F ino`): BSD flock locks, whole-file and
held by an open file, and POSIX byte-range locks (fcntl, lockf), held by a process or, for
open file description locks, by an open file. The kernel names each holder by a lock owner
that is unique on one mount only, so a holder is (kind, session, owner) and every record is
tagged with the session that took it: a dead session's locks go with it (Session._drop).

A change reads the inode's whole table and writes it back in one optimistic transaction, so
two nodes taking conflicting locks at once cannot both succeed: one of them conflicts and
reruns on the other's table. Waiting for a lock is the caller's affair (aifs.vfs.locks).
"""

from collections.abc import Iterable
from dataclasses import astuple, dataclass, replace
from fcntl import F_UNLCK, F_WRLCK

import msgpack

from aifs.meta import keys
from aifs.meta.kv import Batch, KVStore
from aifs.meta.txn import Txn, retried

POSIX = 0
FLOCK = 1
TO_END = 1 << 63  # an end past every offset: the lock covers the file however far it grows


class SessionGone(Exception):
    """The session taking a lock was declared dead; a lock under its id would never be freed."""


@dataclass(frozen=True)
class LockRecord:
    """One held lock: bytes [start, end) of the file, of `type` F_RDLCK or F_WRLCK (a request
    may also be F_UNLCK). `fh` is the open file it was taken through and `pid` the process
    that took it, on the mount of session `sid`."""

    kind: int
    sid: int
    owner: int
    fh: int
    pid: int
    type: int
    start: int = 0
    end: int = TO_END

    @property
    def holder(self) -> tuple[int, int, int]:
        return self.kind, self.sid, self.owner

    def overlaps(self, other: "LockRecord") -> bool:
        return self.start < other.end and other.start < self.end

    def touches(self, other: "LockRecord") -> bool:
        """Overlapping or adjacent: two such locks of one owner and type are one lock."""
        return self.start <= other.end and other.start <= self.end

    def conflicts(self, other: "LockRecord") -> bool:
        return (self.kind == other.kind and self.holder != other.holder and self.overlaps(other)
                and F_WRLCK in (self.type, other.type))


def first_conflict(records: Iterable[LockRecord], request: LockRecord) -> LockRecord | None:
    """The first lock of another holder that keeps `request` from being granted."""
    if request.type == F_UNLCK:
        return None
    return next((record for record in records if record.conflicts(request)), None)


def with_request(records: list[LockRecord], request: LockRecord) -> list[LockRecord]:
    """The table once `request` is granted: its holder's locks of its kind are cut around the
    requested range (a flock is always the whole file), the new lock goes in unless it is
    F_UNLCK, and locks of the holder that touch it with the same type merge into it."""
    kept = []
    merged = request
    for record in records:
        if record.holder != request.holder:
            kept.append(record)
        elif request.type != F_UNLCK and record.type == request.type and record.touches(merged):
            merged = replace(merged, start=min(merged.start, record.start), end=max(merged.end, record.end))
        else:
            kept.extend(_outside(record, request.start, request.end))
    if request.type != F_UNLCK:
        kept.append(merged)
    return sorted(kept, key=lambda record: (record.start, record.end, record.holder))


def _outside(record: LockRecord, start: int, end: int) -> list[LockRecord]:
    """The parts of `record` before `start` and from `end` on."""
    if record.end <= start or end <= record.start:
        return [record]
    parts = []
    if record.start < start:
        parts.append(replace(record, end=start))
    if end < record.end:
        parts.append(replace(record, start=end))
    return parts


def decode(data: bytes | None) -> list[LockRecord]:
    return [] if data is None else [LockRecord(*fields) for fields in msgpack.unpackb(data)]


def _store(batch: Batch, key: bytes, records: list[LockRecord]) -> None:
    if records:
        batch.put(key, msgpack.packb([astuple(record) for record in records]))
    else:
        batch.delete(key)


class LockTable:
    """The volume's file locks on any engine: on a shared one a lock is taken only while the
    session taking it is alive, so a cleaned session cannot leave one behind."""

    def __init__(self, kv: KVStore) -> None:
        self._kv = kv

    def locks(self, ino: int) -> list[LockRecord]:
        return decode(self._kv.get(keys.locks(ino)))

    def conflict(self, ino: int, request: LockRecord) -> LockRecord | None:
        """What F_GETLK reports: the lock that would keep `request` from being granted now."""
        return first_conflict(self.locks(ino), request)

    @retried
    def apply(self, ino: int, request: LockRecord) -> tuple[LockRecord | None, bool]:
        """Grant `request` (take, change or release a lock): (None, True) when it is granted, or
        (the conflicting lock, whether anything changed) when another holder has one in the way.
        A POSIX request then changes nothing; a flock request still drops the holder's old
        flock, as a conversion between shared and exclusive does on Linux."""
        txn = Txn(self._kv)
        key = keys.locks(ino)
        records = decode(txn.get(key))
        conflict = first_conflict(records, request)
        if conflict is not None:
            if request.kind == POSIX or not _holds(records, request):
                return conflict, False
            request = replace(request, type=F_UNLCK)
        elif request.type != F_UNLCK and self._kv.shared and txn.get(keys.session(request.sid)) is None:
            raise SessionGone(f"session {request.sid} was declared dead by the other nodes")
        _store(txn.batch, key, with_request(records, request))
        txn.commit()
        return conflict, True

    @retried
    def drop_file(self, ino: int, sid: int, fh: int) -> None:
        """The last close of open file `fh` on session `sid`: locks taken through it go (its flock,
        and open file description locks, which no process's close releases)."""
        txn = Txn(self._kv)
        key = keys.locks(ino)
        records = decode(txn.get(key))
        kept = [record for record in records if (record.sid, record.fh) != (sid, fh)]
        if len(kept) != len(records):
            _store(txn.batch, key, kept)
            txn.commit()

    def clear(self) -> None:
        """Drop every lock: on a one-node engine, locks never outlive the mount that took them."""
        batch = Batch()
        for key, _ in self._kv.scan(keys.LOCKS):
            batch.delete(key)
        if batch.ops:
            self._kv.commit(batch)


def _holds(records: list[LockRecord], request: LockRecord) -> bool:
    return any(record.holder == request.holder for record in records)


def drop_session_locks(txn: Txn, sid: int) -> None:
    """Within the transaction that removes session `sid`: every lock it held goes too."""
    for key, value in txn.kv.scan(keys.LOCKS):
        records = decode(value)
        kept = [record for record in records if record.sid != sid]
        if len(kept) != len(records):
            txn.batch.expect(key, value)
            _store(txn.batch, key, kept)
