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
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar

import xxhash

from aifs.flash.endpoint import FAILURES_TO_DOWN, RetryPolicy, ServerHandle, ServerUnavailable
from aifs.flash.erasure import ErasureCode
from aifs.flash.ring import VNODES, HashRing
from aifs.rdma.auth import Secret
from aifs.rdma.loop_tcp import LoopTcpReader
from aifs.rdma.select import select_transport
from aifs.rdma.transport import Address, BlockMissing, Connection, RemoteError, Transport
from aifs.tiers.breaker import CircuitBreaker
from aifs.tiers.checksum import CorruptBlock
from aifs.tiers.prober import Prober

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
    def __init__(self, servers: Sequence[str], replicas: int = 2, transport: str | Transport = "auto",
                 timeout: float = 0.5, read_bound: float = 1.0, probe_interval: float = 1.0,
                 failures_to_down: int = FAILURES_TO_DOWN, erasure: tuple[int, int] | None = None,
                 pin: bool = False, vnodes: int = VNODES, streams: int = 2, namespace: bytes = b"",
                 rdma_device: str | None = None, name: str = "remote", kind: str = "flash server", *,
                 secret: Secret) -> None:
        """`name` is the tier's in status and metrics, `kind` what its servers are called in logs.
        No `servers` is a tier whose members come later, through `set_servers`."""
        addresses = [Address.parse(s) for s in servers]
        if len(set(addresses)) != len(addresses):
            raise ValueError(f"need distinct {kind}s, got {list(servers)}")
        self._ec = ErasureCode(*erasure) if erasure else None
        width = self._ec.width if self._ec else replicas
        if addresses and not 1 <= width <= len(addresses):
            raise ValueError(f"placing a block on {width} servers needs at least that many; "
                             f"{len(addresses)} configured")
        self.name, self.kind = name, kind
        self.replicas = replicas
        self.pin = pin
        self.namespace = namespace
        self._transport = (
            select_transport(transport, rdma_device, streams=streams, timeout=timeout, secret=secret)
            if isinstance(transport, str) else transport)
        self._secret = secret
        self._policy = RetryPolicy(timeout=timeout, bound=read_bound)
        self._breaker_rules = (failures_to_down, probe_interval)
        self._pool = ThreadPoolExecutor(max_workers=max(4, 2 * len(addresses)), thread_name_prefix="aifs-flash")
        self._stat_lock = threading.Lock()
        self._stats: tuple[float, int, int] | None = None  # (when, capacity, used)
        self._on_loop = self._transport.name == "tcp" and self._ec is None
        self._servers: dict[str, ServerHandle] = {}
        self._loop_readers: dict[str, LoopTcpReader] = {}
        self._ring = HashRing((), vnodes)
        self.set_servers(map(str, addresses))
        self._prober = Prober(self._down, self._probe, probe_interval)

    # -- membership ------------------------------------------------------------------

    def set_servers(self, servers: Iterable[str], local: str = "") -> None:
        """Follow a membership that changes (the mounts of a shared volume): a server that joined
        gets a connection and its place on the ring, one that left loses both. `local`, this
        node itself, keeps its place on the ring, so that every member places blocks alike, but
        is never sent a request: a block placed here is read from this node's own tiers.

        Readers on other threads see the old or the new servers, never a mix that fails: the
        maps are replaced whole, and a server missing from the one a reader holds is skipped.
        Called on the loop that `get_range_on_loop` runs on, whose sockets of servers that left
        it closes."""
        wanted = list(dict.fromkeys(str(Address.parse(s)) for s in servers))  # in the order given
        remote = [name for name in wanted if name != local]
        current, readers = self._servers, self._loop_readers
        joined = {name: self._handle(Address.parse(name)) for name in remote if name not in current}
        left = [handle for name, handle in current.items() if name not in remote]
        self._servers = {name: current.get(name) or joined[name] for name in remote}
        if self._on_loop:
            self._loop_readers = {name: readers.get(name) or LoopTcpReader(self._servers[name].address, self._secret)
                                  for name in remote}
        if set(wanted) != self._ring.nodes:
            self._ring = HashRing(wanted, self._ring.vnodes)
        for handle in joined.values():
            self._pool.submit(handle.open)
        for handle in left:
            handle.connection.close()
        for name, reader in readers.items():
            if name not in self._loop_readers:
                reader.close()

    def _handle(self, address: Address) -> ServerHandle:
        failures_to_down, probe_interval = self._breaker_rules
        breaker = CircuitBreaker(f"{self.kind} {address}", failures_to_down, probe_interval)
        return ServerHandle(address, self._transport.connect(address), self._policy, breaker)

    def _probe(self, name: str) -> None:
        handle = self._servers.get(name)
        if handle is not None:
            handle.probe()

    # -- placement -------------------------------------------------------------------

    def _key(self, block_id: int) -> int:
        """The id a block has on the servers: its own, or hashed with the namespace."""
        if not self.namespace:
            return block_id
        return xxhash.xxh3_64_intdigest(self.namespace + block_id.to_bytes(8, "little")) & _LOW63

    def _down(self) -> list[str]:
        return [name for name, handle in self._servers.items() if not handle.up]

    def _replica_set(self, block_id: int) -> list[ServerHandle]:
        """The block's copies in ring order; a down server's place goes to the next one, and
        this node's own place (see `set_servers`) to none."""
        servers = self._servers
        owners = self._ring.owners(block_id, self.replicas, skip=self._down())
        return [servers[n] for n in owners if n in servers]

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
                handle.received_bytes += len(data)
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
        return self._on_loop

    async def open_on_loop(self, per_server: int = 2) -> None:
        """Connect the loop's sockets ahead of the first ranged reads (best effort)."""
        for reader in self._loop_readers.values():
            await reader.open(per_server, self._policy.timeout)

    async def get_range_on_loop(self, block_id: int, offset: int, length: int) -> bytes | None:
        """`get_range` on the calling trio loop, with the same retries, replica order and
        health: for TCP, where a thread hop would cost as much as the network."""
        assert self._on_loop
        block_id = self._key(block_id)
        for handle in self._replica_set(block_id):
            reader = self._loop_readers.get(handle.name)
            if reader is None:  # left since: the next replica, if any
                continue
            read = partial(_read_on_loop, reader, block_id, offset, length)
            with _as_miss(handle, block_id):
                data = await handle.call_on_loop(read)
                handle.received_bytes += len(data)
                return data
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
        if not targets and not pin:  # placed on this node itself, or no server is up
            return
        writes = [self._request(h, block_id, self._write(object_id, payload, pin))
                  for h, object_id, payload in targets]
        stored = sum(bool(ok) for ok in self._fan_out(writes))
        wanted = self._ec.width if self._ec else self.replicas
        if pin and stored < wanted:
            raise RemoteWriteFailed(f"block {block_id:016x} reached {stored} of {wanted} flash servers")
        if stored < needed:
            log.warning("block %016x was not stored on the %s tier (%d of %d servers took it)",
                        block_id, self.name, stored, len(targets))

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

    def whole_copies(self, block_id: int) -> tuple[int, list[str]]:
        """The block's id on the servers and, in ring order, the servers that are up and should
        hold a whole copy of it: none when it is erasure-coded, as each server holds a shard."""
        key = self._key(block_id)
        return key, [] if self._ec is not None else [h.name for h in self._replica_set(key)]

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
        down), its breaker's state, current failure streak and last error, requests it answered and
        block bytes read from it."""
        return [{"server": name, **h.breaker.health(), "answered": h.answered, "fetched_bytes": h.received_bytes}
                for name, h in self._servers.items()]

    def close_on_loop(self) -> None:
        """Close the loop's sockets (on that loop: trio sockets cannot be closed from a thread)."""
        for reader in self._loop_readers.values():
            reader.close()

    def close(self) -> None:
        self._prober.close()
        self._pool.shutdown(wait=True)
        for handle in self._servers.values():
            handle.connection.close()
        self._transport.close()
