"""RDMA verbs transport: block reads are one-sided RDMA READs from the server's registered slots.

Everything but reads (writes, deletes, stats, and `locate`, which tells where
a block sits) goes over the authenticated TCP channel (`auth`: only a client
holding the server's secret gets the region's keys), which also carries the key exchange:
the client's queue pair address out, the server's queue pair and registered
region back. A server without a device answers `noverbs`; the connection then
reads over TCP and says so once in the log.
"""

import logging
import mmap
import queue
import threading
import time
from typing import Any

from aifs.rdma.auth import Secret
from aifs.rdma.keys import KeyExchangeError, QpInfo, RegionInfo
from aifs.rdma.pool import BufferPool, Chunk
from aifs.rdma.slots import SlotChurn, SlotReader, SlotRef, SlotTooSmall
from aifs.rdma.tcp import DEFAULT_TIMEOUT, TcpConnection
from aifs.rdma.transport import Address, RemoteError, ServerStat, TransportError
from aifs.rdma.verbs import QueuePair, QueuePairStuck, VerbsNic
from aifs.rdma.wire import LOCATE, NO_VERBS, QP, TOO_LARGE

log = logging.getLogger(__name__)

POOL_BYTES = 64 << 20
CHUNK_BYTES = (4 << 20) + (8 << 10)  # a 4 MiB block between two slot headers, page-rounded


class VerbsTransport:
    """Opens the device and registers the client's read buffers on first use, once per process."""

    name = "verbs"

    def __init__(self, device: str, port: int = 1, gid_index: int = 0, streams: int = 2,
                 timeout: float = DEFAULT_TIMEOUT, pool_bytes: int = POOL_BYTES,
                 chunk_bytes: int = CHUNK_BYTES, *, secret: Secret) -> None:
        self.device, self.port, self.gid_index = device, port, gid_index
        self.streams, self.timeout, self.secret = streams, timeout, secret
        self._pool_bytes, self._chunk_bytes = pool_bytes, chunk_bytes
        self._lock = threading.Lock()
        self._opened: tuple[VerbsNic, BufferPool, Any] | None = None

    def opened(self) -> tuple[VerbsNic, BufferPool, Any]:
        """(device, pool of registered read buffers, its MR)."""
        with self._lock:
            if self._opened is None:
                nic = VerbsNic(self.device, self.port, self.gid_index)
                memory = mmap.mmap(-1, self._pool_bytes)
                self._opened = (nic, BufferPool(memory, self._chunk_bytes), nic.register(memory, remote_read=False))
            return self._opened

    def connect(self, address: Address) -> "VerbsConnection":
        return VerbsConnection(self, address)

    def close(self) -> None:
        with self._lock:
            if self._opened is not None:
                nic, _, mr = self._opened
                mr.close()
                nic.close()
                self._opened = None


class VerbsConnection:
    def __init__(self, transport: VerbsTransport, address: Address) -> None:
        self.address = address
        self._transport = transport
        self._control = TcpConnection(address, transport.streams, transport.timeout, secret=transport.secret)
        self._lock = threading.Lock()
        self._reader: SlotReader | None = None
        self._qps: queue.Queue[QueuePair] = queue.Queue()
        self._region: RegionInfo | None = None
        self._tcp_only = False

    # -- setup ---------------------------------------------------------------------

    def _slots(self, timeout: float) -> SlotReader | None:
        """The slot reader, after the key exchange; None when this server serves reads over TCP only."""
        with self._lock:
            if self._reader is None and not self._tcp_only:
                self._exchange(timeout)
            return self._reader

    def _exchange(self, timeout: float) -> None:
        nic, pool, _ = self._transport.opened()
        qps: list[QueuePair] = []
        try:
            for _ in range(self._transport.streams):
                qps.append(nic.queue_pair(remote_read=False))
                answer = self._control.call({"op": QP, "qp": qps[-1].local_info().encode()}, timeout=timeout)[0]
                self._region = RegionInfo.decode(answer["region"])
                qps[-1].connect(QpInfo.decode(answer["qp"]))
        except Exception as e:
            for qp in qps:
                qp.close()
            if isinstance(e, RemoteError) and e.code == NO_VERBS:
                log.warning("flash server %s has no RDMA device; reading from it over TCP", self.address)
                self._tcp_only = True
                return
            if isinstance(e, (KeyExchangeError, nic.v.PyverbsError)):
                raise TransportError(f"RDMA setup with {self.address} failed: {e}") from e
            raise
        for qp in qps:
            self._qps.put(qp)
        self._reader = SlotReader(self._locate, self._fetch, pool)

    def _reset(self) -> None:
        """A queue pair failed: drop them all, the next read exchanges keys again."""
        with self._lock:
            self._reader = None
            while not self._qps.empty():
                self._qps.get_nowait().close()

    # -- what SlotReader needs -----------------------------------------------------

    def _locate(self, block_id: int, timeout: float) -> SlotRef:
        answer = self._control.call({"op": LOCATE, "id": block_id}, timeout=timeout)[0]
        return SlotRef(answer["off"], answer["len"])

    def _fetch(self, reads: list[tuple[int, int, int]], chunk: Chunk, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        _, pool, mr = self._transport.opened()
        region = self._region
        assert region is not None
        try:
            qp = self._qps.get(timeout=timeout)
        except queue.Empty:
            raise TransportError(f"no RDMA queue pair to {self.address} came free") from None
        try:
            qp.read([(region.addr + r, pool.address + local, n) for r, local, n in reads], region.rkey,
                    mr.lkey, max(0.0, deadline - time.monotonic()))
        except QueuePairStuck:
            chunk.retire()
            raise
        finally:
            if qp.broken:
                qp.close()
            else:
                self._qps.put(qp)

    # -- the Connection interface -----------------------------------------------------

    def open(self, timeout: float | None = None) -> None:
        budget = self._transport.timeout if timeout is None else timeout
        self._control.open(budget)
        self._slots(budget)

    def read_into(self, block_id: int, buf: memoryview | bytearray, offset: int = 0,
                  timeout: float | None = None) -> int:
        budget = self._transport.timeout if timeout is None else timeout
        deadline = time.monotonic() + budget
        view = memoryview(buf).cast("B")
        for attempt in range(2):  # a failed queue pair is set up afresh once (the server may have restarted)
            slots = self._slots(max(0.0, deadline - time.monotonic()))
            if slots is None:
                break
            try:
                return slots.read_into(block_id, view, offset, max(0.0, deadline - time.monotonic()))
            except (SlotTooSmall, SlotChurn):
                break
            except RemoteError as e:
                if e.code != TOO_LARGE:
                    raise
                break
            except TransportError:
                self._reset()
                if attempt or time.monotonic() >= deadline:
                    raise
        return self._control.read_into(block_id, view, offset, max(0.0, deadline - time.monotonic()))

    def read(self, block_id: int, timeout: float | None = None) -> bytes:
        budget = self._transport.timeout if timeout is None else timeout
        deadline = time.monotonic() + budget
        slots = self._slots(budget)
        if slots is None:
            return self._control.read(block_id, budget)
        try:
            buf = bytearray(slots.length(block_id, budget))
        except RemoteError as e:
            if e.code != TOO_LARGE:
                raise
            return self._control.read(block_id, max(0.0, deadline - time.monotonic()))
        self.read_into(block_id, buf, 0, max(0.0, deadline - time.monotonic()))
        return bytes(buf)

    def write(self, block_id: int, data: bytes | memoryview, timeout: float | None = None, pin: bool = False,
              checksum: int | None = None) -> None:
        self._control.write(block_id, data, timeout, pin, checksum)

    def delete(self, block_id: int, timeout: float | None = None) -> None:
        self._control.delete(block_id, timeout)

    def unpin(self, block_id: int, timeout: float | None = None) -> None:
        self._control.unpin(block_id, timeout)

    def contains(self, block_id: int, timeout: float | None = None) -> bool:
        return self._control.contains(block_id, timeout)

    def stat(self, timeout: float | None = None) -> ServerStat:
        return self._control.stat(timeout)

    def close(self) -> None:
        self._reset()
        self._control.close()
