"""The S3 tier's PUTs, sent from a process of their own (`upload_process`).

A PUT spends milliseconds of Python in botocore (building, signing, parsing the
answer). In the mount's process that work holds the interpreter lock the FUSE
loop needs for every request, so uploads running beside writers slowed 16 KiB
creates from about 1,300/s to 300/s; the same PUTs from another process left
them at 900-1,300/s. So the mount hands each block to a child process and waits
for the answer with the lock released.

The bytes go through shared memory: one slot per connection the tier may open,
each as large as a block, in a memfd both processes map. A request names its
slot over a socket pair; the answer says whether the PUT succeeded or how it
failed, which is raised in the mount, and whether the child's circuit breaker
is open, which the tier's breaker follows, so that reads stop waiting on an S3
the uploads found down. The child has its own client and retrier, configured
like the tier's. It exits when the socket closes, so it never outlives the
mount, also after a kill -9. A child that dies fails the PUTs it held (the
uploader retries them later) and the next PUT starts a new one; one that cannot
start leaves the PUTs to the mount. Every block is copied twice more than in
the mount (into the slot, and out of it into a body botocore takes), which is
why the tier does not do this unless told to.
"""

import itertools
import logging
import mmap
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path

from aifs.config.models import S3Tier as S3Settings
from aifs.tiers.breaker import CircuitBreaker, CircuitOpen
from aifs.tiers.s3_client import make_client
from aifs.tiers.s3_retry import S3Error, S3Unavailable, retrier_for

log = logging.getLogger(__name__)

EXIT_WAIT_S = 10.0
START_TIMEOUT_S = 60.0
READY = ("ready", 1)  # and the protocol's version: a child of another aifs version is refused
# How a PUT failed: (unavailable, message, code, transient, whether the child's breaker is open).
Failure = tuple[bool, str, str, bool, bool]
Outcome = Failure | None  # what the child answers: None for success


def _lost(message: str) -> Failure:
    """The answer for a PUT nobody can tell the outcome of: worth another try."""
    return (False, message, "", True, False)


class PutterFailed(Exception):
    """The child process could not be started: PUTs must run in this process."""


class _Child:
    """One started child: its process, the socket to it, and the PUTs waiting for answers."""

    def __init__(self, proc: subprocess.Popen, sock: socket.socket) -> None:
        self.proc = proc
        self.sock = sock
        self.conn = Connection(os.dup(sock.fileno()))
        self.waiting: dict[int, Future[Outcome]] = {}

    def stop(self) -> None:
        """The child sees the end of its input (even while our reader thread waits on the
        socket, which a plain close would not end) and exits after what it holds."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def release(self) -> None:
        """Close our ends of the socket."""
        self.conn.close()
        self.sock.close()


class PutProcess:
    """The mount's side: `put` blocks (without the interpreter lock) until the child has
    PUT the bytes, and raises what the child's attempt raised; `breaker` learns of it.
    Bytes longer than `slot_size` are not its to send (`fits`)."""

    def __init__(self, settings: S3Settings, breaker: CircuitBreaker, slot_size: int) -> None:
        self._settings = settings
        self._breaker = breaker
        self.slot_size = slot_size
        self._lock = threading.Lock()  # the child's start, and sending one request
        self._ids = itertools.count()
        self._child: _Child | None = None
        self._memfd = -1
        self._arena: mmap.mmap | None = None
        self._free: queue.LifoQueue[int] = queue.LifoQueue()  # LIFO: few slots ever get touched
        for slot in reversed(range(settings.max_connections)):
            self._free.put(slot)

    @property
    def pid(self) -> int | None:
        """The child's process id; None until the first PUT starts it."""
        child = self._child
        return None if child is None else child.proc.pid

    def fits(self, data: bytes | bytearray) -> bool:
        return len(data) <= self.slot_size

    def put(self, key: str, data: bytes | bytearray) -> None:
        """Raises PutterFailed before anything is sent if the child cannot be started."""
        with self._lock:
            if self._child is None:
                self._start()
        try:
            started = self._breaker.admit()  # S3 found down by reads: fail as fast as they do
        except CircuitOpen as exc:
            raise S3Unavailable(f"PUT s3://{self._settings.bucket}/{key}: S3 {exc}") from None
        slot = self._free.get()
        try:
            assert self._arena is not None
            self._arena[slot * self.slot_size:slot * self.slot_size + len(data)] = data
            outcome = self._send(key, slot, len(data)).result()
        finally:
            self._free.put(slot)  # answered, or the child is gone: nobody reads the slot now
        if outcome is not None:
            self._raise(outcome, started)
        self._breaker.succeeded()

    def _raise(self, outcome: Failure, started: float) -> None:
        unavailable, message, code, transient, breaker_open = outcome
        if not transient:
            self._breaker.succeeded()  # S3 answered: it is up
        elif breaker_open:
            self._breaker.trip(message)
        else:
            self._breaker.failed(message, started)
        raise S3Unavailable(message) if unavailable else S3Error(message, code, transient)

    def _send(self, key: str, slot: int, length: int) -> "Future[Outcome]":
        """The answer to come; a child that is gone (and cannot be restarted) is an answer
        too, so that every admitted request reports its outcome to the breaker."""
        future: Future[Outcome] = Future()
        with self._lock:
            request = next(self._ids)
            try:
                child = self._child or self._start()
                child.waiting[request] = future
                child.conn.send((request, key, slot, length))
            except (OSError, PutterFailed) as exc:
                future.set_result(_lost(f"PUT {key}: the S3 upload process is gone ({exc})"))
        return future

    def _map_arena(self) -> None:
        size = self._settings.max_connections * self.slot_size
        self._memfd = os.memfd_create("aifs-s3-puts")
        os.ftruncate(self._memfd, size)
        self._arena = mmap.mmap(self._memfd, size)

    def _start(self) -> _Child:
        try:
            if self._arena is None:
                self._map_arena()
            proc, ours = self._spawn()
        except OSError as exc:
            raise PutterFailed(f"cannot start the S3 upload process: {exc}") from exc
        child = _Child(proc, ours)
        self._handshake(child)
        self._child = child
        threading.Thread(target=self._read_answers, args=(child,), name="aifs-s3-put-answers", daemon=True).start()
        log.info("S3 PUTs run in process %d", proc.pid)
        return child

    def _handshake(self, child: _Child) -> None:
        """Hand the child its settings and wait until its client is made; a child that cannot
        get that far (a broken environment) is not restarted for every PUT."""
        try:
            child.conn.send((self._settings, self.slot_size))
            if child.conn.poll(START_TIMEOUT_S) and child.conn.recv() == READY:
                return
            reason = f"no answer in {START_TIMEOUT_S:.0f} s"
        except (EOFError, OSError) as exc:
            reason = str(exc) or type(exc).__name__
        child.stop()
        child.proc.kill()
        code = child.proc.wait()
        child.release()
        raise PutterFailed(f"the S3 upload process {child.proc.pid} did not start ({reason}; exit code {code})")

    def _spawn(self) -> tuple[subprocess.Popen, socket.socket]:
        """The child, started from this checkout of aifs, with the arena and its socket end."""
        ours, theirs = socket.socketpair()
        package_root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "aifs.tiers.s3_putter", str(theirs.fileno()), str(self._memfd)],
                pass_fds=(theirs.fileno(), self._memfd), stdin=subprocess.DEVNULL,
                env=dict(os.environ, PYTHONPATH=path),
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        return proc, ours

    def _read_answers(self, child: _Child) -> None:
        """Hand each answer to its waiting PUT; when the child is gone, fail those still waiting."""
        try:
            while True:
                request, outcome = child.conn.recv()
                child.waiting.pop(request).set_result(outcome)
        except (EOFError, OSError):
            pass
        except Exception:  # noqa: BLE001 - a garbled answer: the child is no longer trusted
            log.exception("unreadable answer from the S3 upload process %d; stopping it", child.proc.pid)
            child.proc.kill()
        with self._lock:
            if self._child is child:
                self._child = None
            waiting, child.waiting = child.waiting, {}
        child.release()  # a child still running sees the end of its input, and exits
        code = child.proc.wait()
        if waiting:
            log.warning("the S3 upload process %d exited (code %s) with %d PUTs in flight; "
                        "they will be retried", child.proc.pid, code, len(waiting))
        for future in waiting.values():
            future.set_result(_lost(f"the S3 upload process exited (code {code}) during the PUT"))

    def close(self) -> None:
        """Let the child finish what it holds and exit."""
        with self._lock:
            child, self._child = self._child, None
        if child is None:
            return
        child.stop()
        try:
            child.proc.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            child.proc.kill()


def serve(conn: Connection, arena: mmap.mmap) -> None:
    """The child: PUT the slots named, up to `max_connections` at once, and answer each."""
    settings, slot_size = conn.recv()
    client = make_client(settings)
    conn.send(READY)
    retrier = retrier_for(settings, announce=False)  # the mount's breaker follows this one and says so
    breaker = retrier.breaker
    answer_lock = threading.Lock()
    slots = memoryview(arena)
    bodies = [bytearray() for _ in range(settings.max_connections)]  # reused: no fresh pages per PUT

    def put(request: int, key: str, slot: int, length: int) -> None:
        outcome: Outcome = None
        body = bodies[slot]  # botocore takes bytes or a bytearray, not a view of the slot
        body[:] = slots[slot * slot_size:slot * slot_size + length]
        try:
            retrier.run(f"PUT s3://{settings.bucket}/{key}",
                        partial(client.put_object, Bucket=settings.bucket, Key=key, Body=body))
        except S3Error as exc:
            outcome = (isinstance(exc, S3Unavailable), str(exc), exc.code, exc.transient,
                       breaker.state != "closed")
        except Exception as exc:  # noqa: BLE001 - the mount must hear of every failure
            outcome = _lost(f"PUT s3://{settings.bucket}/{key} failed: {exc!r}")
        try:
            with answer_lock:
                conn.send((request, outcome))
        except OSError:  # the mount is gone: nobody waits for this answer
            pass

    with ThreadPoolExecutor(settings.max_connections, thread_name_prefix="aifs-s3-put") as pool:
        while True:
            try:
                request = conn.recv()
            except (EOFError, OSError):
                break
            pool.submit(put, *request)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the mount decides when to stop, by closing the socket
    sock_fd, memfd = int(sys.argv[1]), int(sys.argv[2])
    serve(Connection(sock_fd), mmap.mmap(memfd, os.fstat(memfd).st_size))


if __name__ == "__main__":
    main()
