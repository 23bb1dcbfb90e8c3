"""The block server's network front: frames in, store calls, frames out.

One trio task per connection reads requests and starts a task per request,
so requests pipelined on one socket are served concurrently (up to
MAX_IN_FLIGHT, then the reader waits) and answered in whatever order they
finish; quick requests (small ranges, bookkeeping) are answered by the reader
itself, as a task of their own would cost more than they do. A small read that
the page cache holds is served on the event loop; every read that needs the
disk, and all I/O of big blocks, goes to a bounded thread pool, so one slow
disk read never holds up the other clients. Sockets are driven without a
scheduler trip per call (LoopSocket). A failure inside one request becomes an
error answer to that request, never the end of the server.
"""

import logging
import signal
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from aifs.flash.store import BlockStore, ChecksumMismatch, CorruptRecord, Record, StoreFull
from aifs.rdma.keys import KeyExchangeError, QpInfo
from aifs.rdma.loopsock import LoopSocket
from aifs.rdma.select import choose
from aifs.rdma.slots import SlotTooSmall
from aifs.rdma.transport import Address
from aifs.rdma.verbs_server import ARENA_BYTES, SLOT_BYTES, VerbsEndpoint
from aifs.rdma.wire import (
    BAD_REQUEST, CHECKSUM, CORRUPT, DELETE, FULL, GET, HAS, LOCATE, MISSING, NO_VERBS, PUT, QP, STAT, TOO_LARGE, UNPIN,
    FrameReader, ProtocolError, frame,
)

log = logging.getLogger(__name__)

INLINE_BYTES = 64 << 10
MAX_IN_FLIGHT = 64
Answer = tuple[dict[str, Any], memoryview | None]


class _Closed(Exception):
    """The peer closed the connection."""


class BlockServer:
    def __init__(self, store: BlockStore, verbs: VerbsEndpoint | None = None, io_threads: int = 8) -> None:
        self.store = store
        self.verbs = verbs
        self._io = trio.CapacityLimiter(io_threads)
        self._handlers: dict[str, Callable[[dict[str, Any], Any, list[Any]], Awaitable[Answer]]] = {
            GET: self._get, PUT: self._put, DELETE: self._delete, HAS: self._has, STAT: self._stat,
            UNPIN: self._unpin, QP: self._qp, LOCATE: self._locate,
        }

    async def serve(self, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Accept connections until cancelled; reports the bound address through task_status."""
        family = (await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))[0][0]
        listener = trio.socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        await listener.bind((host, port))
        listener.listen(128)
        task_status.started(Address(*listener.getsockname()[:2]))
        with listener:
            async with trio.open_nursery() as nursery:
                while True:
                    conn, _ = await listener.accept()
                    nursery.start_soon(self._connection, LoopSocket.adopt(conn))

    async def _connection(self, conn: LoopSocket) -> None:
        frames = FrameReader()
        send_lock = trio.Lock()
        in_flight = trio.Semaphore(MAX_IN_FLIGHT)
        resources: list[Any] = []  # what this client holds here (RDMA queue pairs)
        try:
            async with trio.open_nursery() as nursery:
                try:  # caught inside the nursery: the answers still being sent finish first
                    while True:
                        await _take(in_flight)
                        header, n = await _next_header(conn, frames)
                        payload = Record(n) if header.get("op") == PUT else None
                        if payload is None and n:
                            raise ProtocolError(f"{header.get('op')!r} request with a payload")
                        if payload is not None:
                            await _recv_exactly(conn, frames, payload.payload)
                        answer = (conn, send_lock, in_flight, header, payload, resources)
                        if _quick(header):  # a task of its own would cost more than the request
                            await self._answer(*answer)
                        else:
                            nursery.start_soon(self._answer, *answer)
                except (_Closed, OSError, ProtocolError) as e:
                    log.debug("connection closed: %s", e)
        finally:
            conn.close()
            for resource in resources:
                resource.close()

    async def _answer(self, conn: LoopSocket, send_lock: trio.Lock, in_flight: trio.Semaphore,
                      header: dict[str, Any], payload: Record | None, resources: list[Any]) -> None:
        try:
            handler = self._handlers.get(str(header.get("op")))
            try:
                reply, body = await handler(header, payload, resources) if handler else (
                    {"err": BAD_REQUEST, "msg": f"unknown op {header.get('op')!r}"}, None)
            except Exception as e:
                log.exception("request %s failed", header.get("op"))
                reply, body = {"err": BAD_REQUEST, "msg": f"{type(e).__name__}: {e}"}, None
            reply["rid"] = header.get("rid")
            buffers = [memoryview(frame(reply, len(body) if body is not None else 0))]
            if body is not None and len(body):
                buffers.append(body)
            await _take(send_lock)
            try:
                await conn.sendmsg(buffers)
            finally:
                send_lock.release()
        except OSError as e:  # the client went away; its reader task ends the connection
            log.debug("answer not sent: %s", e)
        finally:
            in_flight.release()

    async def _in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """On one of the server's I/O threads."""
        return await trio.to_thread.run_sync(fn, *args, limiter=self._io)

    async def _in_thread_if_big(self, nbytes: int, fn: Callable[..., Any], *args: Any) -> Any:
        if nbytes <= INLINE_BYTES:
            return fn(*args)
        return await self._in_thread(fn, *args)

    # -- requests --------------------------------------------------------------------

    async def _get(self, header: dict[str, Any], _: Any, __: list[Any]) -> Answer:
        block_id, offset, length = header["id"], header.get("off", 0), header.get("len", -1)
        try:
            nbytes = self.store.size(block_id) if length < 0 else length
            found = self.store.read_cached(block_id, offset, length) if nbytes <= INLINE_BYTES else None
            data, size, block_sum = found or await self._in_thread(self.store.read, block_id, offset, length)
        except KeyError:
            return {"err": MISSING}, None
        except CorruptRecord as e:
            return {"err": CORRUPT, "msg": str(e)}, None
        return {"size": size, "sum": block_sum}, data

    async def _put(self, header: dict[str, Any], record: Record, _: list[Any]) -> Answer:
        try:
            await self._in_thread_if_big(len(record.payload), self.store.put, header["id"], record, header["sum"],
                                         bool(header.get("pin")))
        except ChecksumMismatch as e:
            return {"err": CHECKSUM, "msg": str(e)}, None
        except StoreFull as e:
            return {"err": FULL, "msg": str(e)}, None
        return {}, None

    async def _delete(self, header: dict[str, Any], _: Any, __: list[Any]) -> Answer:
        self.store.delete(header["id"])
        if self.verbs is not None:
            self.verbs.arena.forget(header["id"])
        return {}, None

    async def _unpin(self, header: dict[str, Any], _: Any, __: list[Any]) -> Answer:
        self.store.unpin(header["id"])
        return {}, None

    async def _has(self, header: dict[str, Any], _: Any, __: list[Any]) -> Answer:
        return {"has": self.store.contains(header["id"])}, None

    async def _stat(self, header: dict[str, Any], _: Any, __: list[Any]) -> Answer:
        return {"stat": {**self.store.stat(), "verbs": self.verbs is not None}}, None

    async def _qp(self, header: dict[str, Any], _: Any, resources: list[Any]) -> Answer:
        """Key exchange: connect a queue pair to the client's, hand out ours and the region's keys."""
        if self.verbs is None:
            return {"err": NO_VERBS}, None
        try:
            client = QpInfo.decode(header.get("qp"))
        except KeyExchangeError as e:
            return {"err": BAD_REQUEST, "msg": str(e)}, None
        qp = self.verbs.accept(client)
        resources.append(qp)
        return {"qp": qp.local_info().encode(), "region": self.verbs.region.encode()}, None

    async def _locate(self, header: dict[str, Any], _: Any, __: list[Any]) -> Answer:
        if self.verbs is None:
            return {"err": NO_VERBS}, None
        block_id = header["id"]
        try:
            ref = await self._in_thread_if_big(self.store.size(block_id), self.verbs.arena.locate, block_id,
                                               self._load)
        except KeyError:
            return {"err": MISSING}, None
        except CorruptRecord as e:
            return {"err": CORRUPT, "msg": str(e)}, None
        except SlotTooSmall as e:
            return {"err": TOO_LARGE, "msg": str(e)}, None
        return {"off": ref.offset, "len": ref.length}, None

    def _load(self, block_id: int) -> tuple[memoryview, int]:
        data, _, block_sum = self.store.read(block_id)
        return data, block_sum


def _quick(header: dict[str, Any]) -> bool:
    """Requests served from memory or with one small read: a ranged GET of up to
    INLINE_BYTES, and the bookkeeping ones (HAS, STAT, DELETE, UNPIN). A small GET
    that turns out to need the disk holds up only its own connection meanwhile."""
    op = header.get("op")
    if op == GET:
        length = header.get("len", -1)
        return isinstance(length, int) and 0 <= length <= INLINE_BYTES
    return op in (HAS, STAT, DELETE, UNPIN)


async def _take(lock: trio.Lock | trio.Semaphore) -> None:
    """Acquire `lock`, without a trip through the scheduler when it is free."""
    try:
        lock.acquire_nowait()
    except trio.WouldBlock:
        await lock.acquire()


async def _next_header(conn: LoopSocket, frames: FrameReader) -> tuple[dict[str, Any], int]:
    while (got := frames.header()) is None:
        n = await conn.recv_into(frames.space())
        if n == 0:
            raise _Closed("peer closed")
        frames.filled(n)
    return got


async def _recv_exactly(conn: LoopSocket, frames: FrameReader, dest: memoryview) -> None:
    got = frames.take(dest)
    while got < len(dest):
        n = await conn.recv_into(dest[got:])
        if n == 0:
            raise _Closed("peer closed in the middle of a payload")
        got += n


def run(root: Path, capacity: int, listen: Address, transport: str = "auto", device: str | None = None,
        arena_bytes: int = ARENA_BYTES, slot_bytes: int = SLOT_BYTES,
        on_ready: Callable[[Address, str], None] = lambda address, kind: None) -> None:
    """Serve until SIGTERM or SIGINT; `on_ready` is told the bound address and the transport."""
    choice = choose(transport, device)
    store = BlockStore(root, capacity)
    verbs = VerbsEndpoint(choice.device, arena_bytes, slot_bytes) if choice.device else None
    try:
        trio.run(_serve_until_signal, BlockServer(store, verbs), listen, lambda a: on_ready(a, choice.kind))
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
