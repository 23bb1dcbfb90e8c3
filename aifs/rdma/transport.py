"""The interface every block transport implements; the remote tier sees only this.

A connection is created without touching the network and connects on its first
request, so building a tier never blocks on a server that is down; the tier then asks
each one to `open` in the background, ahead of the first reads. Each request
takes its own timeout: the caller's retry policy decides how long a server may
keep it waiting.
"""

from dataclasses import dataclass
from typing import Protocol

from aifs.tiers.checksum import CorruptBlock, checksum


class TransportError(Exception):
    """The server did not answer properly (refused, reset, timed out): counts against its health."""


class TransportUnavailable(Exception):
    """The transport cannot run on this machine (no pyverbs, no RDMA device)."""


class RemoteError(Exception):
    """The server answered, with an error: it is alive, the request simply failed there."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code


class BlockMissing(RemoteError):
    """The server does not hold the block: a plain cache miss."""

    def __init__(self, block_id: int) -> None:
        super().__init__("missing", f"block {block_id:016x}")
        self.block_id = block_id


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> "Address":
        """'HOST:PORT' (IPv6 as '[::1]:PORT'); raises ValueError naming the bad text."""
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ValueError(f"not HOST:PORT: {text!r}")
        return cls(host.strip("[]"), int(port))

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ServerStat:
    capacity: int
    used: int
    blocks: int
    pinned: int
    verbs: bool


def verify(block_id: int, data: bytes | memoryview, expected: int, where: "Address") -> None:
    """Bytes from a flash server are checked like bytes from any tier below RAM."""
    if checksum(data) != expected:
        raise CorruptBlock(block_id, f"flash {where}")


class Connection(Protocol):
    """Requests to one block server; thread-safe, and requests from many threads pipeline."""

    address: Address

    def open(self, timeout: float | None = None) -> None:
        """Connect now rather than on the first request (raises TransportError), so that
        a tier built ahead of its reads does not make them pay for connecting."""

    def read_into(self, block_id: int, buf: memoryview | bytearray, offset: int = 0,
                  timeout: float | None = None) -> int:
        """Copy the block's bytes from `offset` into `buf` (up to len(buf)); returns the count.

        A read of the whole block is checked against its checksum (CorruptBlock);
        raises BlockMissing, RemoteError or TransportError.
        """

    def read(self, block_id: int, timeout: float | None = None) -> bytes | bytearray:
        """The whole block, checked against its checksum (a bytearray where that saves a copy;
        nobody changes it afterwards)."""

    def write(self, block_id: int, data: bytes | memoryview, timeout: float | None = None,
              pin: bool = False, checksum: int | None = None) -> None:
        """Store a block; the server refuses it (RemoteError 'checksum') if the bytes do
        not match `checksum` (computed here when None). A pinned block is never evicted."""

    def delete(self, block_id: int, timeout: float | None = None) -> None: ...

    def unpin(self, block_id: int, timeout: float | None = None) -> None:
        """The server may evict the block again (it reached the cold tier)."""

    def contains(self, block_id: int, timeout: float | None = None) -> bool: ...

    def stat(self, timeout: float | None = None) -> ServerStat: ...

    def close(self) -> None: ...


class Transport(Protocol):
    name: str

    def connect(self, address: Address) -> Connection: ...

    def close(self) -> None: ...
