"""The block server's network front: frames in, store calls, frames out.

Every connection authenticates first (`aifs.rdma.auth`): a client that does not
prove it holds the server's secret is answered `auth` and closed, and from then
on each request's MAC is checked before its header is even decoded, so nothing
unauthenticated reaches the store or makes the server read a payload.

One trio task per connection reads requests and starts a task per request,
so requests pipelined on one socket are served concurrently (up to
MAX_IN_FLIGHT, then the reader waits) and answered in whatever order they
finish; quick requests (small ranges, bookkeeping) are answered by the reader
itself, as a task of their own would cost more than they do. A small read that
the page cache holds is served on the event loop; every read that needs the
disk, and all I/O of big blocks, goes to a bounded thread pool, so one slow
disk read never holds up the other clients. Sockets are driven without a
scheduler trip per call (LoopSocket).

No input ends the server. Every header field is checked (`requests`); a put
larger than the largest block, or a request whose memory could never fit, is
refused before its payload is read (the payload is skipped, in small pieces);
put payloads and read answers hold memory only within a ceiling shared by all
connections (`limits`), and a payload is received into mapped memory that is
backed only as its bytes arrive; connections beyond the cap are turned away,
and one that makes no progress for the idle timeout is closed; a failed accept
(out of descriptors) is logged and retried after a pause; a failure inside one
request is an error answer, and any failure of one connection, MemoryError
included, closes that connection only.
"""

import logging
import mmap
import resource
import signal
import socket
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import trio

from aifs.flash.budget import ByteBudget
from aifs.flash.limits import ServerLimits
from aifs.flash.requests import TRANSFORM, BadRequest, Request, parse
from aifs.flash.store import SUM, BlockStore, ChecksumMismatch, CorruptRecord, Record, Refused, ServedStore, StoreFull
from aifs.push.serving import NEED_TOKENIZER, NeedTokenizer, ServedTransforms, TransformRefused, piece_answer
from aifs.rdma.auth import NO_HANDSHAKE, AuthError, RequestMacs, Secret, ServerHandshake
from aifs.rdma.keys import KeyExchangeError, QpInfo
from aifs.rdma.loopsock import LoopSocket, PeerClosed
from aifs.rdma.select import choose
from aifs.rdma.slots import SlotTooSmall
from aifs.rdma.transport import Address
from aifs.rdma.verbs_server import ARENA_BYTES, SLOT_BYTES, VerbsEndpoint
from aifs.rdma.wire import (
    AUTH, BAD_REQUEST, BUSY, CHECKSUM, CORRUPT, DELETE, FULL, GET, HAS, LIMIT, LOCATE, MISSING, NO_VERBS, PUT, QP,
    REFUSED, STAT, TOO_LARGE, UNPIN, FrameReader, ProtocolError, frame,
)

log = logging.getLogger(__name__)

INLINE_BYTES = 64 << 10
MAX_IN_FLIGHT = 64
SKIP_BYTES = 64 << 10       # the piece in which a refused payload is read past
RESERVED_FDS = 64           # descriptors besides connections: segments, journal, listener, threads' files
FIRST_PAUSE, LAST_PAUSE = 0.05, 1.0  # after a failed accept, doubling
CLIENT_FAULTS = (OSError, ProtocolError, AuthError)


@dataclass(slots=True)
class Answer:
    reply: dict[str, Any]
    body: memoryview | None = None


def _error(code: str, message: str = "") -> Answer:
    return Answer({"err": code, "msg": message})


class _Received(Record):
    """A put's payload in mapped memory: pages are backed only as its bytes arrive, so a
    client that announces a block and sends little of it costs little."""

    def __init__(self, length: int) -> None:
        self.buf = mmap.mmap(-1, SUM.size + length)
        self.payload = memoryview(self.buf)[SUM.size:]


class _Link:
    """One authenticated connection: its socket, its answers in flight, what it holds here."""

    def __init__(self, conn: LoopSocket, host: str) -> None:
        self.conn = conn
        self.host = host  # the client's, for the bytes served to each
        self.send_lock = trio.Lock()
        self.in_flight = trio.Semaphore(MAX_IN_FLIGHT)
        self.answering = 0
        self.resources: list[Any] = []  # RDMA queue pairs, closed with the connection

    async def send(self, reply: dict[str, Any], body: memoryview | None = None) -> None:
        buffers = [memoryview(frame(reply, len(body) if body is not None else 0))]
        if body is not None and len(body):
            buffers.append(body)
        await _take(self.send_lock)
        try:
            await self.conn.sendmsg(buffers)
        except OSError:  # a frame sent in part leaves nothing the client could read after it
            self.conn.hang_up()
            raise
        finally:
            self.send_lock.release()


class _AcceptPauses:
    """Out of descriptors, the connection stays queued and accept fails again at once:
    without a pause between attempts the server would spin. Logs once per streak."""

    def __init__(self) -> None:
        self._pause = 0.0
        self._failures = 0

    async def failed(self, error: OSError) -> None:
        if not self._failures:
            log.warning("accepting a connection failed (%s); retrying, with pauses of up to %gs", error, LAST_PAUSE)
        self._failures += 1
        self._pause = min(max(2 * self._pause, FIRST_PAUSE), LAST_PAUSE)
        await trio.sleep(self._pause)

    def succeeded(self) -> None:
        if self._failures:
            log.warning("accepting connections again after %d failed attempts", self._failures)
        self._pause, self._failures = 0.0, 0


Offload = Callable[..., Awaitable[Any]]


class BlockServer:
    def __init__(self, store: ServedStore, secret: Secret, verbs: VerbsEndpoint | None = None, io_threads: int = 8,
                 limits: ServerLimits = ServerLimits(), offload: Offload | None = None,
                 transforms: ServedTransforms | None = None) -> None:
        """`offload(fn, *args)` runs a disk call off the loop; by default on `io_threads`
        threads of the server's own (a mount serving peers queues them behind its own reads).
        `transforms`: those this server runs over its blocks (aifs.push); None refuses all."""
        self.store = store
        self.transforms = transforms
        self.verbs = verbs
        self.limits = limits
        self.connections = 0
        self.served: Counter[str] = Counter()  # block bytes sent, by client host
        self._secret = secret
        self._budget = ByteBudget(limits.max_request_memory)
        self._offload = offload or partial(_on_threads, trio.CapacityLimiter(io_threads))
        self._handlers: dict[str, Callable[[Request, Any, list[Any]], Awaitable[Answer]]] = {
            GET: self._get, PUT: self._put, DELETE: self._delete, HAS: self._has, STAT: self._stat,
            UNPIN: self._unpin, QP: self._qp, LOCATE: self._locate, TRANSFORM: self._transform,
        }

    async def serve(self, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Accept connections until cancelled; reports the bound address through task_status."""
        family = (await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))[0][0]
        listener = trio.socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        await listener.bind((host, port))
        listener.listen(128)
        task_status.started(Address(*listener.getsockname()[:2]))
        await self.serve_on(listener)

    async def serve_on(self, listener: trio.socket.SocketType) -> None:
        """Accept connections on a bound, listening socket until cancelled; closes it then."""
        with listener:
            async with trio.open_nursery() as nursery:
                await self._accept_forever(listener, nursery)

    async def _accept_forever(self, listener: trio.socket.SocketType, nursery: trio.Nursery) -> None:
        pauses = _AcceptPauses()
        while True:
            try:
                sock, peer = await listener.accept()
            except OSError as e:
                await pauses.failed(e)
                continue
            pauses.succeeded()
            if self.connections >= self.limits.max_connections:
                _turn_away(sock, f"it serves at most {self.limits.max_connections} connections; try again later")
                continue
            self.connections += 1
            nursery.start_soon(self._connection, sock, Address(*peer[:2]))

    async def _connection(self, sock: trio.socket.SocketType, peer: Address) -> None:
        """One client from accept to close: whatever goes wrong here ends this connection only."""
        link: _Link | None = None
        try:
            conn = LoopSocket.adopt(sock, stall=self.limits.idle_timeout)
            link = _Link(conn, peer.host)
            frames = FrameReader()
            frames.check = (await self._handshake(conn, frames)).check
            await self._serve(link, frames, peer)
        except CLIENT_FAULTS as e:
            _log_closed(peer, e)
        except Exception:
            log.exception("connection from %s failed; it is closed, the server goes on", peer)
        finally:
            self.connections -= 1
            _close(link, sock)

    async def _handshake(self, conn: LoopSocket, frames: FrameReader) -> RequestMacs:
        """Prove each other the secret, in a few seconds (a connection that has not is not
        yet a client); the checker of this connection's request MACs."""
        with trio.move_on_after(self.limits.handshake_timeout):
            return await self._prove_secret(conn, frames)
        raise TimeoutError(f"no handshake within {self.limits.handshake_timeout:g}s")

    async def _prove_secret(self, conn: LoopSocket, frames: FrameReader) -> RequestMacs:
        handshake = ServerHandshake(self._secret)
        await conn.sendmsg([memoryview(frame(handshake.hello))])
        answer, n = await conn.next_header(frames)
        try:
            if n:
                raise AuthError(NO_HANDSHAKE)
            proof, macs = handshake.accept(answer)
        except AuthError as e:
            await conn.sendmsg([memoryview(frame({"err": AUTH, "msg": str(e)}))])
            raise
        await conn.sendmsg([memoryview(frame(proof))])
        return macs

    async def _serve(self, link: _Link, frames: FrameReader, peer: Address) -> None:
        async with trio.open_nursery() as nursery:
            try:  # caught inside the nursery: the answers still being sent finish first
                while True:
                    await _take(link.in_flight)
                    header, n = await self._next_header(link, frames)
                    await self._dispatch(link, frames, nursery, header, n)
            except AuthError as e:
                log.warning("closing the connection from %s: %s", peer, e)
                await _last_word(link, {"err": AUTH, "msg": str(e)})
            except (OSError, ProtocolError) as e:
                _log_closed(peer, e)

    async def _next_header(self, link: _Link, frames: FrameReader) -> tuple[dict[str, Any], int]:
        """The next request; a connection is idle, and closed, only when no answer is pending."""
        while True:
            try:
                return await link.conn.next_header(frames)
            except TimeoutError:
                if not link.answering:
                    raise

    async def _dispatch(self, link: _Link, frames: FrameReader, nursery: trio.Nursery, header: dict[str, Any],
                        n: int) -> None:
        """Serve one request: a refused one at once (its payload skipped), a quick one here,
        the others in a task of their own."""
        rid = header.get("rid")
        try:
            request = parse(header)
        except BadRequest as e:
            await self._refuse(link, frames, rid, _error(BAD_REQUEST, str(e)), n)
            return
        need = n + self._answer_bytes(request)
        refusal = self._refusal(request, n, need)
        if refusal is not None:
            await self._refuse(link, frames, rid, refusal, n)
            return
        await self._budget.take(need)
        try:
            record = await self._receive(link, frames, n) if request.op in (PUT, TRANSFORM) else None
        except BaseException:
            self._budget.give_back(need)
            raise
        link.answering += 1
        job = (link, rid, request, record, need)
        if _quick(request):  # a task of its own would cost more than the request
            await self._answer(*job)
        else:
            nursery.start_soon(self._answer, *job)

    def _answer_bytes(self, request: Request) -> int:
        """Memory a read's answer will hold until it is sent (a transform's: its piece)."""
        if request.op not in (GET, TRANSFORM):
            return 0
        size = self.store.size(request.block_id)
        return size if request.length < 0 else min(size, request.length)

    def _refusal(self, request: Request, n: int, need: int) -> Answer | None:
        if n and request.op not in (PUT, TRANSFORM):
            return _error(BAD_REQUEST, f"a {request.op} request carries no payload")
        if request.op == PUT and n > self.limits.max_block:
            return _error(LIMIT, f"a block of {n} bytes is larger than this server takes "
                                 f"({self.limits.max_block}, --max-block-size)")
        if need > self._budget.capacity:
            return _error(LIMIT, f"the request needs {need} bytes of memory, more than this server's "
                                 f"{self._budget.capacity} (--max-request-memory)")
        return None

    async def _refuse(self, link: _Link, frames: FrameReader, rid: Any, answer: Answer, n: int) -> None:
        try:
            await link.send({**answer.reply, "rid": rid})
        finally:
            link.in_flight.release()
        await _skip(link.conn, frames, n)

    async def _receive(self, link: _Link, frames: FrameReader, n: int) -> Record:
        record = _Received(n)
        await link.conn.recv_payload(frames, record.payload)
        return record

    async def _answer(self, link: _Link, rid: Any, request: Request, record: Record | None, held: int) -> None:
        """Run one request and send its answer; then give back its memory and its place in flight."""
        try:
            answer = await self._outcome(request, record, link.resources)
            await link.send({**answer.reply, "rid": rid}, answer.body)
            if answer.body is not None:
                self.served[link.host] += len(answer.body)
        except OSError as e:  # the client went away; its reader task ends the connection
            log.debug("answer not sent: %s", e)
        finally:
            self._budget.give_back(held)
            link.answering -= 1
            link.in_flight.release()

    async def _outcome(self, request: Request, record: Record | None, resources: list[Any]) -> Answer:
        try:
            return await self._handlers[request.op](request, record, resources)
        except Refused as e:  # the store's answer, not a failure of the server
            return _error(REFUSED, str(e))
        except Exception as e:  # one request's failure is its own error answer
            log.exception("request %s failed", request.op)
            return _error(BAD_REQUEST, f"{type(e).__name__}: {e}")

    async def _in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """On one of the server's I/O threads."""
        return await self._offload(fn, *args)

    async def _in_thread_if_big(self, nbytes: int, fn: Callable[..., Any], *args: Any) -> Any:
        if nbytes <= INLINE_BYTES:
            return fn(*args)
        return await self._in_thread(fn, *args)

    # -- requests --------------------------------------------------------------------

    async def _get(self, request: Request, _: Any, __: list[Any]) -> Answer:
        block_id, offset, length = request.block_id, request.offset, request.length
        try:
            nbytes = self.store.size(block_id) if length < 0 else length
            found = self.store.read_cached(block_id, offset, length) if nbytes <= INLINE_BYTES else None
            data, size, block_sum = found or await self._in_thread(self.store.read, block_id, offset, length)
        except KeyError:
            return _error(MISSING)
        except CorruptRecord as e:
            return _error(CORRUPT, str(e))
        return Answer({"size": size, "sum": block_sum}, data)

    async def _put(self, request: Request, record: Record, _: list[Any]) -> Answer:
        try:
            await self._in_thread_if_big(len(record.payload), self.store.put, request.block_id, record,
                                         request.checksum, request.pin)
        except ChecksumMismatch as e:
            return _error(CHECKSUM, str(e))
        except StoreFull as e:
            return _error(FULL, str(e))
        return Answer({})

    async def _delete(self, request: Request, _: Any, __: list[Any]) -> Answer:
        self.store.delete(request.block_id)
        if self.verbs is not None:
            self.verbs.arena.forget(request.block_id)
        return Answer({})

    async def _unpin(self, request: Request, _: Any, __: list[Any]) -> Answer:
        self.store.unpin(request.block_id)
        return Answer({})

    async def _has(self, request: Request, _: Any, __: list[Any]) -> Answer:
        return Answer({"has": self.store.contains(request.block_id)})

    async def _stat(self, request: Request, _: Any, __: list[Any]) -> Answer:
        return Answer({"stat": {**self.store.stat(), "verbs": self.verbs is not None}})

    async def _qp(self, request: Request, _: Any, resources: list[Any]) -> Answer:
        """Key exchange: connect a queue pair to the client's, hand out ours and the region's keys."""
        if self.verbs is None:
            return _error(NO_VERBS)
        try:
            client = QpInfo.decode(request.qp)
        except KeyExchangeError as e:
            return _error(BAD_REQUEST, str(e))
        qp = self.verbs.accept(client)
        resources.append(qp)
        return Answer({"qp": qp.local_info().encode(), "region": self.verbs.region.encode()})

    async def _locate(self, request: Request, _: Any, __: list[Any]) -> Answer:
        if self.verbs is None:
            return _error(NO_VERBS)
        block_id = request.block_id
        try:
            ref = await self._in_thread_if_big(self.store.size(block_id), self.verbs.arena.locate, block_id,
                                               self._load)
        except KeyError:
            return _error(MISSING)
        except CorruptRecord as e:
            return _error(CORRUPT, str(e))
        except SlotTooSmall as e:
            return _error(TOO_LARGE, str(e))
        return Answer({"off": ref.offset, "len": ref.length})

    async def _transform(self, request: Request, record: Record, _: list[Any]) -> Answer:
        """Run a built-in transform over a piece of a block; the piece is cut from the whole
        block, which the store checks against its checksum."""
        if self.transforms is None:
            return _error(REFUSED, "this server runs no transforms (its admin enables them with "
                                   "`aifs flash serve --transforms filter,mask,tokenize`)")
        try:
            transform = self.transforms.transform(request.job, bytes(record.payload) or None)
            data, _, _ = await self._in_thread(self.store.read, request.block_id)
        except NeedTokenizer as e:
            return _error(NEED_TOKENIZER, str(e))
        except TransformRefused as e:
            return _error(REFUSED, str(e))
        except KeyError:
            return _error(MISSING)
        except CorruptRecord as e:
            return _error(CORRUPT, str(e))
        end = len(data) if request.length < 0 else request.offset + request.length
        reply, body = await self._in_thread(piece_answer, transform, data[request.offset:end])
        return Answer(reply, memoryview(body))

    def _load(self, block_id: int) -> tuple[memoryview, int]:
        data, _, block_sum = self.store.read(block_id)
        return data, block_sum


async def _on_threads(limiter: trio.CapacityLimiter, fn: Callable[..., Any], *args: Any) -> Any:
    return await trio.to_thread.run_sync(fn, *args, limiter=limiter)


def _quick(request: Request) -> bool:
    """Requests served from memory or with one small read: a ranged GET of up to
    INLINE_BYTES, and the bookkeeping ones (HAS, STAT, DELETE, UNPIN). A small GET
    that turns out to need the disk holds up only its own connection meanwhile."""
    if request.op == GET:
        return 0 <= request.length <= INLINE_BYTES
    return request.op in (HAS, STAT, DELETE, UNPIN)


async def _take(lock: trio.Lock | trio.Semaphore) -> None:
    """Acquire `lock`, without a trip through the scheduler when it is free."""
    try:
        lock.acquire_nowait()
    except trio.WouldBlock:
        await lock.acquire()


async def _skip(conn: LoopSocket, frames: FrameReader, n: int) -> None:
    """Read past a refused request's payload in small pieces, so the next request is found."""
    scratch = memoryview(bytearray(min(n, SKIP_BYTES)))
    while n:
        piece = scratch[:min(n, len(scratch))]
        await conn.recv_payload(frames, piece)
        n -= len(piece)


def _log_closed(peer: Address, reason: Exception) -> None:
    """A client that hung up is routine; one that broke the protocol or went quiet is worth a line."""
    level = logging.DEBUG if isinstance(reason, PeerClosed) else logging.INFO
    log.log(level, "connection from %s closed: %s", peer, str(reason) or type(reason).__name__)


async def _last_word(link: _Link, reply: dict[str, Any]) -> None:
    """Tell a client why it is being hung up on, if it still listens."""
    try:
        await link.send(reply)
    except OSError:
        pass


def _turn_away(sock: trio.socket.SocketType, why: str) -> None:
    """Say `busy` to a connection over the cap, without waiting for the client, and close it."""
    with socket.socket(sock.family, sock.type, sock.proto, fileno=sock.detach()) as plain:
        try:
            plain.setblocking(False)
            plain.send(frame({"err": BUSY, "msg": why}))
        except OSError:  # the client is gone already, or not reading: it is closed either way
            pass


def _close(link: _Link | None, sock: trio.socket.SocketType) -> None:
    if link is None:
        sock.close()
        return
    link.conn.close()
    for held in link.resources:
        try:
            held.close()
        except Exception:
            log.exception("releasing a connection's %s failed", type(held).__name__)


def _check_descriptors(limits: ServerLimits) -> None:
    """Each connection is a descriptor: warn when the cap does not fit the process's limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and limits.max_connections + RESERVED_FDS > soft:
        log.warning("--max-connections %d and the server's own files do not fit this process's limit of %d "
                    "open files; raise it (ulimit -n) or lower --max-connections", limits.max_connections, soft)


def run(root: Path, capacity: int, listen: Address, secret: Secret, limits: ServerLimits = ServerLimits(),
        transport: str = "auto", device: str | None = None, arena_bytes: int = ARENA_BYTES,
        slot_bytes: int = SLOT_BYTES, on_ready: Callable[[Address, str], None] = lambda address, kind: None,
        transforms: ServedTransforms | None = None) -> None:
    """Serve until SIGTERM or SIGINT; `on_ready` is told the bound address and the transport."""
    choice = choose(transport, device)
    _check_descriptors(limits)
    store = BlockStore(root, capacity)
    verbs = VerbsEndpoint(choice.device, arena_bytes, slot_bytes) if choice.device else None
    try:
        server = BlockServer(store, secret, verbs, limits=limits, transforms=transforms)
        trio.run(_serve_until_signal, server, listen, lambda a: on_ready(a, choice.kind))
    finally:
        if verbs is not None:
            verbs.close()
        store.close()


async def _serve_until_signal(server: BlockServer, listen: Address, on_ready: Callable[[Address], None]) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            on_ready(await nursery.start(server.serve, listen.host, listen.port))
            async for signum in signals:
                log.info("stopping on %s", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
