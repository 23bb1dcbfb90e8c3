"""Client: reads files of aifs mounts over their data sockets, and through the mount whatever a
data socket does not serve: a fallback answer, a path on no aifs mount, a mount without a socket
or whose socket failed twice in a row (a killed or restarted mount: the read through the mount
then gives its own error, e.g. ENOTCONN). Whichever way, the bytes are those a read through the
mount returns, or an OSError; never others.

One connection per mount and process: a forked child (a DataLoader worker) or a process that
changed its user connects anew, with its own credentials, and never uses its parent's segment
descriptors. Threads of one process take turns on a client.
"""

import logging
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from aifs.bypass.protocol import MAX_PATHS
from aifs.client.assemble import Mismatch, assemble, blocks_of
from aifs.client.connection import Connection, Refused
from aifs.client.heap import keep_freed_file_memory
from aifs.client.mounts import MountTable
from aifs.control.wire import ProtocolError

log = logging.getLogger(__name__)

DEFAULT_BATCH = 64
DEFAULT_TIMEOUT_S = 60.0
REST_S = 5.0  # a mount whose socket failed twice is read through the mount this long before a new try

AnyPath = str | bytes | os.PathLike
_FS_ENCODING = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()  # os.fsencode's, without its checks
Result = bytes | OSError
_AGAIN, _MISMATCH = object(), object()


@dataclass
class ReadCounts:
    """Files this client read since its process began using it."""

    bypass: int = 0  # files read from data socket answers
    remembered: int = 0  # of those, files read by an answer kept from an earlier request
    shared: int = 0  # of those, first read by an answer another reader asked for (the mount's board)
    mount: int = 0  # files read through the mount
    retried: int = 0  # files asked for again after bytes failed their checksum


def _identity() -> tuple[int, int, int]:
    return os.getpid(), os.geteuid(), os.getegid()


class Client:
    def __init__(self, batch: int = DEFAULT_BATCH, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        """`batch`: paths per request (at most 256); `timeout`: seconds a reply may take before
        the connection counts as failed."""
        if not 1 <= batch <= MAX_PATHS:
            raise ValueError(f"batch must be between 1 and {MAX_PATHS}, not {batch}")
        self.batch = batch
        self.timeout = timeout
        self.counts = ReadCounts()
        self._lock = threading.Lock()
        self._identity = _identity()
        self._mounts = MountTable()
        self._connections: dict[bytes, Connection] = {}
        self._resting: dict[bytes, float] = {}
        keep_freed_file_memory()
        _live.add(self)

    def __reduce__(self) -> tuple:
        """A client sent to another process (a spawned DataLoader worker) starts afresh there."""
        return Client, (self.batch, self.timeout)

    @property
    def open_segments(self) -> int:
        """Segment files held open (handed over to a root reader only)."""
        return sum(len(conn.segments) for conn in self._connections.values())

    def read(self, path: AnyPath) -> bytes:
        """The bytes of the file at `path`; raises the OSError a read through the mount would."""
        return self.read_many([path])[0]

    def read_many(self, paths: Iterable[AnyPath], errors: Literal["raise", "return"] = "raise") -> list[Result]:
        """The bytes of each file, in order. With errors="raise" the first failing path's OSError
        is raised (after all were read); with "return" it stands in that path's place."""
        if errors not in ("raise", "return"):
            raise ValueError(f"errors must be 'raise' or 'return', not {errors!r}")
        paths = list(paths)
        with self._lock:
            self._check_identity()
            results = self._read_all(paths)
        if errors == "raise":
            for result in results:
                if isinstance(result, OSError):
                    raise result
        return results

    def close(self) -> None:
        with self._lock:
            for mountpoint in list(self._connections):
                self._disconnect(mountpoint)

    # -- where each path goes ------------------------------------------------

    def _read_all(self, paths: list[AnyPath]) -> list[Result]:
        results: list[Result | None] = [None] * len(paths)
        by_mount: dict[bytes, list[tuple[int, bytes]]] = {}
        self._drop_dead_connections()
        remembered = shared = 0
        for i, path in enumerate(paths):  # the hot loop of a reader: calls kept few
            where = self._place(path)
            if where is None:
                results[i] = self._through_mount(path)
                continue
            mountpoint, relative = where
            conn = self._connections.get(mountpoint)
            answers = conn.answers if conn is not None else None
            found = answers.read(relative) if answers is not None else None
            if found is None:
                by_mount.setdefault(mountpoint, []).append((i, relative))
                continue
            results[i], posted = found
            remembered += 1
            shared += posted
        self.counts.bypass += remembered
        self.counts.remembered += remembered
        self.counts.shared += shared
        for mountpoint, wanted in by_mount.items():
            self._read_from(mountpoint, wanted, paths, results)
        return results

    def _place(self, path: AnyPath) -> tuple[bytes, bytes] | None:
        """(mountpoint, path relative to it); None for a path the mount must walk itself ('..'
        after a symbolic link is not the lexical parent; a trailing '/' asks for a directory)."""
        raw = path.encode(*_FS_ENCODING) if type(path) is str else os.fsencode(path)
        if not raw.startswith(b"/"):
            raw = os.path.join(os.getcwdb(), raw)
        if raw.endswith(b"/"):
            return None
        if raw.find(b"/.") >= 0 or raw.find(b"//") >= 0:  # not `in`, which first tries an int and fails
            if b".." in raw.split(b"/"):
                return None
            raw = os.path.normpath(raw)
        return self._mounts.place(raw)

    def _drop_dead_connections(self) -> None:
        """Connections to mounts that have stopped go, with the answers they kept."""
        for mountpoint, conn in list(self._connections.items()):
            if not conn.alive():
                self._disconnect(mountpoint)

    def _through_mount(self, path: AnyPath) -> Result:
        self.counts.mount += 1
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            return e

    # -- one mount's data socket -----------------------------------------------

    def _read_from(self, mountpoint: bytes, wanted: list[tuple[int, bytes]], paths: list[AnyPath],
                   results: list[Result | None]) -> None:
        queue, retried = deque(wanted), set()
        while queue:
            batch = [queue.popleft() for _ in range(min(self.batch, len(queue)))]
            reply = self._ask(mountpoint, [relative for _, relative in batch])
            answers = reply["files"] if reply is not None else [None] * len(batch)
            for (i, relative), answer in zip(batch, answers):
                outcome = self._settle(mountpoint, answer, reply, paths[i], relative)
                if outcome is _MISMATCH and i in retried:  # twice: the mount reads it
                    outcome = self._through_mount(paths[i])
                if outcome is _MISMATCH:
                    retried.add(i)
                    self.counts.retried += 1
                if outcome is _AGAIN or outcome is _MISMATCH:
                    queue.append((i, relative))
                else:
                    results[i] = outcome

    def _settle(self, mountpoint: bytes, answer: dict | None, reply: dict | None, path: AnyPath,
                relative: bytes) -> object:
        """The bytes or error one answer gives, or _AGAIN / _MISMATCH to ask again. An answer
        the mount stamped is kept for the next read of the file."""
        if answer is None or "fallback" in answer:
            return self._through_mount(path)
        if "errno" in answer:
            return OSError(answer["errno"], os.strerror(answer["errno"]), os.fspath(path))
        if "again" in answer:
            return _AGAIN
        conn, blocks = self._connections[mountpoint], blocks_of(answer)
        try:
            data = assemble(answer["size"], reply["block_size"], blocks, conn.segments.fds)
        except Mismatch as e:
            if e.segment is not None:
                conn.segments.drop(e.segment)
            return _MISMATCH
        self.counts.bypass += 1
        if "stamp" in answer:
            conn.answers.keep(relative, answer["size"], reply["block_size"], blocks, answer["stamp"])
        return data

    def _ask(self, mountpoint: bytes, relatives: list[bytes]) -> dict | None:
        """The reply to a request, over the connection or, when that fails, a new one; None when
        neither answers (the mount then rests: see REST_S)."""
        if time.monotonic() < self._resting.get(mountpoint, 0.0):
            return None
        failure: Exception | None = None
        for _ in range(2):  # a connection to a mount that restarted fails once; a new one answers
            conn = self._connect(mountpoint)
            if conn is None:
                continue
            try:
                reply = conn.exchange(relatives)
                if len(reply["files"]) != len(relatives):
                    raise ProtocolError(f"{len(reply['files'])} answers to {len(relatives)} paths")
                return reply
            except (OSError, ProtocolError, Refused, KeyError, TypeError) as e:
                failure = e
                self._disconnect(mountpoint)
        log.warning("the data socket of %s %s; reading through the mount for %.0f s", os.fsdecode(mountpoint),
                    "does not answer" if failure is None else f"failed ({failure})", REST_S)
        self._resting[mountpoint] = time.monotonic() + REST_S
        return None

    def _connect(self, mountpoint: bytes) -> Connection | None:
        conn = self._connections.get(mountpoint)
        if conn is not None:
            return conn
        socket_path = self._mounts.socket_of(mountpoint)
        if socket_path is None:
            return None
        try:
            conn = self._connections[mountpoint] = Connection(socket_path, self.timeout)
        except OSError:
            self._mounts.forget_socket(mountpoint)
            return None
        return conn

    def _disconnect(self, mountpoint: bytes) -> None:
        conn = self._connections.pop(mountpoint, None)
        if conn is not None:
            conn.close()
        self._mounts.forget_socket(mountpoint)

    def _check_identity(self) -> None:
        """A forked child, or a process that changed its user, drops what it inherited: the
        server knows the connection by its first owner, and the segment descriptors a root
        parent held are not for its children's eyes. Its counts start from zero."""
        if _identity() == self._identity:
            return
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
        self._resting.clear()
        self.counts = ReadCounts()
        self._identity = _identity()


_live: "weakref.WeakSet[Client]" = weakref.WeakSet()
_default: Client | None = None
_default_lock = threading.Lock()


def default_client() -> Client:
    """The process's own client, made on first use (a forked child reconnects by itself)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default


def _after_fork() -> None:
    """A lock held by another thread at the fork would never be let go in the child."""
    for client in list(_live):
        client._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)
