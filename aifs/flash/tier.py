"""RemoteFlashTier: the tier between local NVMe and S3, on flash servers shared by every node.

It is a cache unless configured otherwise: a put offers the block to its
servers, and a server that fails loses nothing (the block is still staged
locally or in S3); a get tries the block's servers in ring order and answers
None when none has it intact, so the read falls through to the cold tier.
Blocks are placed by consistent hashing with `replicas` copies, or, with
`erasure=(k, m)`, as RS(k, m) shards on k+m servers. With `pin=True` the
servers never evict the blocks (the remote tier may then hold the only copy)
and a put that does not reach every target raises.

Block ids are unique only within one volume, so a tier shared by several
volumes is given a `namespace` (the volume's uuid): blocks are then stored
under a hash of namespace and id, and two volumes never meet on a server.
Mounts of one volume use the same namespace and share its blocks.

Every connection to a server authenticates with the volume's `secret` (the
servers' --secret-file); a server holding another secret refuses us, which
counts as that server failing.

Methods are synchronous and thread-safe, for TierManager's worker threads:
never call them on an event loop, a dead server may take `read_bound` seconds.
The exception are those named `_on_loop`: over TCP, ranged reads (small and
bound by latency) run on the mount's trio loop, where a thread hop would cost
as much as the network.
"""

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar

import xxhash

from aifs.flash.endpoint import RetryPolicy, ServerHandle, ServerUnavailable
from aifs.flash.erasure import ErasureCode
from aifs.flash.health import FAILURES_TO_DOWN, CircuitBreaker, Prober
from aifs.flash.ring import VNODES, HashRing
from aifs.rdma.auth import Secret
from aifs.rdma.loop_tcp import LoopTcpReader
from aifs.rdma.select import select_transport
from aifs.rdma.transport import Address, BlockMissing, Connection, RemoteError, Transport
from aifs.tiers.checksum import CorruptBlock

log = logging.getLogger(__name__)

T = TypeVar("T")
STAT_TTL = 10.0
_LOW63 = (1 << 63) - 1  # shard ids (erasure) have the top bit set, block keys never do


@contextmanager
def _as_miss(handle: ServerHandle, block_id: int) -> Iterator[None]:
    """A request to a cache that did not work out, for whatever reason, is a miss (logged)."""
    try:
        yield
    except BlockMissing:
        pass
    except (RemoteError, CorruptBlock) as e:
        log.warning("block %016x on flash server %s: %s", block_id, handle.name, e)
    except ServerUnavailable as e:
        log.debug("block %016x: %s", block_id, e)


async def _read_on_loop(reader: LoopTcpReader, block_id: int, offset: int, length: int, timeout: float) -> bytes:
    buf = bytearray(length)
    return bytes(memoryview(buf)[:await reader.read_into(block_id, buf, offset, timeout)])


class RemoteWriteFailed(Exception):
    """A pinned put did not reach every target: the block must not be considered stored."""


class RemoteFlashTier:
    name = "remote"

    def __init__(self, servers: Sequence[str], replicas: int = 2, transport: str | Transport = "auto",
                 timeout: float = 0.5, read_bound: float = 1.0, probe_interval: float = 1.0,
                 failures_to_down: int = FAILURES_TO_DOWN, erasure: tuple[int, int] | None = None,
                 pin: bool = False, vnodes: int = VNODES, streams: int = 2, namespace: bytes = b"",
                 rdma_device: str | None = None, *, secret: Secret) -> None:
        addresses = [Address.parse(s) for s in servers]
        if len(set(addresses)) != len(addresses) or not addresses:
            raise ValueError(f"need distinct flash servers, got {list(servers)}")
        self._ec = ErasureCode(*erasure) if erasure else None
        width = self._ec.width if self._ec else replicas
        if not 1 <= width <= len(addresses):
            raise ValueError(f"placing a block on {width} servers needs at least that many; "
                             f"{len(addresses)} configured")
        self.replicas = replicas
        self.pin = pin
        self.namespace = namespace
        self._transport = (
            select_transport(transport, rdma_device, streams=streams, timeout=timeout, secret=secret)
            if isinstance(transport, str) else transport)
        policy = RetryPolicy(timeout=timeout, bound=read_bound)
        self._servers = {str(a): ServerHandle(a, self._transport.connect(a), policy,
                                              CircuitBreaker(str(a), failures_to_down)) for a in addresses}
        self._ring = HashRing(self._servers, vnodes)
        self._pool = ThreadPoolExecutor(max_workers=max(4, 2 * len(addresses)), thread_name_prefix="aifs-flash")
        self._stat_lock = threading.Lock()
        self._stats: tuple[float, int, int] | None = None  # (when, capacity, used)
        for handle in self._servers.values():
            self._pool.submit(handle.open)
        self._loop_readers = ({name: LoopTcpReader(h.address, secret) for name, h in self._servers.items()}
                              if self._transport.name == "tcp" and self._ec is None else None)
        self._prober = Prober(self._down, lambda name: self._servers[name].probe(), probe_interval)

    # -- placement -------------------------------------------------------------------

    def _key(self, block_id: int) -> int:
        """The id a block has on the servers: its own, or hashed with the namespace."""
        if not self.namespace:
            return block_id
        return xxhash.xxh3_64_intdigest(self.namespace + block_id.to_bytes(8, "little")) & _LOW63

    def _down(self) -> list[str]:
        return [name for name, handle in self._servers.items() if not handle.up]

    def _replica_set(self, block_id: int) -> list[ServerHandle]:
        """The block's copies in ring order; a down server's place goes to the next one."""
        return [self._servers[n] for n in self._ring.owners(block_id, self.replicas, skip=self._down())]

    def _shard_set(self, block_id: int) -> list[ServerHandle]:
        """Shard i lives on the i-th server from the block, up or down: readers must find it there."""
        assert self._ec is not None
        return [self._servers[n] for n in self._ring.owners(block_id, self._ec.width)]

    # -- requests ----------------------------------------------------------------------

    def _ask(self, handle: ServerHandle, block_id: int, request: Callable[[Connection, float], T]) -> T | None:
        """One request with the server's retries; None when it did not work out, for whatever reason."""
        with _as_miss(handle, block_id):
            return handle.call(request)
        return None

    def _request(self, handle: ServerHandle, block_id: int,
                 request: Callable[[Connection, float], T]) -> Callable[[], T | None]:
        """`_ask` as a call for `_fan_out`."""
        return lambda: self._ask(handle, block_id, request)

    def _fan_out(self, calls: list[Callable[[], T]]) -> list[T]:
        if len(calls) <= 1:
            return [call() for call in calls]
        return [future.result() for future in [self._pool.submit(call) for call in calls]]

    # -- the Tier protocol ---------------------------------------------------------------

    def get(self, block_id: int) -> bytes | None:
        block_id = self._key(block_id)
        if self._ec is not None:
            return self._get_shards(block_id)
        return self._first_replica(block_id, lambda c, t: c.read(block_id, t))

    def _first_replica(self, block_id: int, request: Callable[[Connection, float], bytes]) -> bytes | None:
        """The answer of the first replica, in ring order, that has the block."""
        for handle in self._replica_set(block_id):
            data = self._ask(handle, block_id, request)
            if data is not None:
                return data
        return None

    def get_range(self, block_id: int, offset: int, length: int) -> bytes | None:
        """Part of a block, unverified (the caller checks its chunk checksums); erasure-coded
        blocks are rebuilt whole first, since their bytes are spread over every shard."""
        if self._ec is not None:
            data = self.get(block_id)
            return None if data is None else data[offset:offset + length]
        block_id = self._key(block_id)

        def read(connection: Connection, timeout: float) -> bytes:
            buf = bytearray(length)
            return bytes(memoryview(buf)[:connection.read_into(block_id, buf, offset, timeout)])

        return self._first_replica(block_id, read)

    @property
    def ranges_on_loop(self) -> bool:
        """Whether `get_range_on_loop` serves ranged reads (TCP, replicas): else use `get_range`."""
        return self._loop_readers is not None

    async def open_on_loop(self, per_server: int = 2) -> None:
        """Connect the loop's sockets ahead of the first ranged reads (best effort)."""
        for reader in (self._loop_readers or {}).values():
            await reader.open(per_server, self._servers[str(reader.address)].policy.timeout)

    async def get_range_on_loop(self, block_id: int, offset: int, length: int) -> bytes | None:
        """`get_range` on the calling trio loop, with the same retries, replica order and
        health: for TCP, where a thread hop would cost as much as the network."""
        assert self._loop_readers is not None
        block_id = self._key(block_id)
        for handle in self._replica_set(block_id):
            read = partial(_read_on_loop, self._loop_readers[handle.name], block_id, offset, length)
            with _as_miss(handle, block_id):
                return await handle.call_on_loop(read)
        return None

    def _get_shards(self, block_id: int) -> bytes | None:
        """Read k shards; if some fail, read the others, and rebuild from any k."""
        assert self._ec is not None
        handles = self._shard_set(block_id)
        live = [i for i, handle in enumerate(handles) if handle.up]
        shards: dict[int, bytes] = {}
        for wave in (live[:self._ec.k], live[self._ec.k:]):
            found = self._fan_out([self._request(handles[i], block_id,
                                                 lambda c, t, o=self._ec.shard_id(block_id, i): c.read(o, t))
                                   for i in wave])
            shards.update({i: shard for i, shard in zip(wave, found) if shard is not None})
            data = self._ec.decode(block_id, shards)
            if data is not None:
                return data
        return None

    def put(self, block_id: int, data: bytes, pin: bool | None = None) -> None:
        """Offer the block to its servers at once; log (or, pinned, raise) when too few took it.

        `pin` overrides the tier's setting for this block: a mount pins blocks not yet in
        the cold tier and offers the others as plain cache entries.
        """
        pin = self.pin if pin is None else pin
        block_id = self._key(block_id)
        if self._ec is not None:
            handles = self._shard_set(block_id)
            targets = [(h, self._ec.shard_id(block_id, i), shard)
                       for i, (h, shard) in enumerate(zip(handles, self._ec.encode(block_id, data))) if h.up]
            needed = self._ec.k
        else:
            targets = [(h, block_id, data) for h in self._replica_set(block_id)]
            needed = 1
        writes = [self._request(h, block_id, self._write(object_id, payload, pin))
                  for h, object_id, payload in targets]
        stored = sum(bool(ok) for ok in self._fan_out(writes))
        wanted = self._ec.width if self._ec else self.replicas
        if pin and stored < wanted:
            raise RemoteWriteFailed(f"block {block_id:016x} reached {stored} of {wanted} flash servers")
        if stored < needed:
            log.warning("block %016x was not stored on the remote tier (%d of %d servers took it)",
                        block_id, stored, len(targets))

    def _write(self, object_id: int, payload: bytes, pin: bool) -> Callable[[Connection, float], bool]:
        def request(connection: Connection, timeout: float) -> bool:
            connection.write(object_id, payload, timeout, pin=pin)
            return True

        return request

    def _objects(self, block_id: int) -> list[tuple[ServerHandle, int]]:
        """(server, object id) of every copy or shard the block should have on servers that are up."""
        if self._ec is not None:
            pairs = [(h, self._ec.shard_id(block_id, i)) for i, h in enumerate(self._shard_set(block_id))]
            return [(h, object_id) for h, object_id in pairs if h.up]
        return [(h, block_id) for h in self._replica_set(block_id)]

    def delete(self, block_id: int) -> None:
        """Best effort: a copy left on a server that was down is never read (ids are never reused) and ages out."""
        block_id = self._key(block_id)
        self._fan_out([self._request(h, block_id, lambda c, t, o=o: c.delete(o, t))
                       for h, o in self._objects(block_id)])

    def unpin(self, block_id: int) -> None:
        """The block reached the cold tier: its servers may evict it again."""
        block_id = self._key(block_id)
        self._fan_out([self._request(h, block_id, lambda c, t, o=o: c.unpin(o, t))
                       for h, o in self._objects(block_id)])

    def contains(self, block_id: int) -> bool:
        block_id = self._key(block_id)
        held = self._fan_out([self._request(h, block_id, lambda c, t, o=o: c.contains(o, t))
                              for h, o in self._objects(block_id)])
        return sum(bool(x) for x in held) >= (self._ec.k if self._ec else 1)

    @property
    def capacity(self) -> int:
        """What the servers can hold, divided by the redundancy (copies, or (k+m)/k for shards)."""
        raw = self._server_totals()[0]
        return raw * self._ec.k // self._ec.width if self._ec else raw // self.replicas

    def used(self) -> int:
        return self._server_totals()[1]

    def _server_totals(self) -> tuple[int, int]:
        """(capacity, used) summed over the servers that answer; cached a few seconds (they are shared)."""
        with self._stat_lock:
            if self._stats is None or time.monotonic() - self._stats[0] > STAT_TTL:
                stats = self._fan_out([self._request(h, 0, lambda c, t: c.stat(t)) for h in self._servers.values()
                                       if h.up])
                answered = [s for s in stats if s is not None]
                self._stats = (time.monotonic(), sum(s.capacity for s in answered), sum(s.used for s in answered))
            return self._stats[1], self._stats[2]

    def status(self) -> list[dict[str, Any]]:
        """One entry per server: whether it is up (and since when, on time.monotonic's clock, when
        down), its current failure streak, requests it answered."""
        return [{"server": name, "up": h.up, "down_since": h.breaker.down_since, "failures": h.breaker.failures,
                 "answered": h.answered}
                for name, h in self._servers.items()]

    def close_on_loop(self) -> None:
        """Close the loop's sockets (on that loop: trio sockets cannot be closed from a thread)."""
        for reader in (self._loop_readers or {}).values():
            reader.close()

    def close(self) -> None:
        self._prober.close()
        self._pool.shutdown(wait=True)
        for handle in self._servers.values():
            handle.connection.close()
        self._transport.close()
