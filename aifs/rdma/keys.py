"""What the two ends of an RDMA connection tell each other over the TCP channel before any READ.

The client sends its queue pair's address (QpInfo); the server answers with
its own and with the registered region clients may read (RegionInfo: base
address, rkey, size, slot size). Both travel as msgpack maps inside ordinary
TCP frames; decoding checks every field, because a wrong number here makes
the NIC read the wrong memory or fail the QP transition far from the cause.
"""

import re
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, Self

_GID = re.compile(r"(?:[0-9a-f]{4}:){7}[0-9a-f]{4}")
_U24, _U16, _U32, _U64 = (1 << 24) - 1, (1 << 16) - 1, (1 << 32) - 1, (1 << 64) - 1
MTUS = range(1, 6)  # IBV_MTU_256 .. IBV_MTU_4096


class KeyExchangeError(ValueError):
    """The peer's connection data is malformed; names the field."""


def _check(name: str, value: Any, limit: int, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= limit:
        raise KeyExchangeError(f"{name}={value!r} is not an integer in [{low}, {limit}]")
    return value


class _Message:
    _limits: ClassVar[dict[str, int]] = {}

    def encode(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def decode(cls, data: Any) -> Self:
        if not isinstance(data, dict):
            raise KeyExchangeError(f"{cls.__name__} must be a map, not {type(data).__name__}")
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        missing = [n for n in names if n not in data]
        if missing:
            raise KeyExchangeError(f"{cls.__name__} lacks {', '.join(missing)}")
        message = cls(**{n: data[n] for n in names})
        message.validate()
        return message

    def validate(self) -> None:
        for name, limit in self._limits.items():
            _check(name, getattr(self, name), limit)


@dataclass(frozen=True, slots=True)
class QpInfo(_Message):
    """An RC queue pair's address: enough for the peer's INIT->RTR->RTS transitions."""

    qp_num: int
    psn: int
    lid: int
    gid: str
    mtu: int

    _limits = {"qp_num": _U24, "psn": _U24, "lid": _U16}

    def validate(self) -> None:
        _Message.validate(self)
        _check("mtu", self.mtu, MTUS.stop - 1, MTUS.start)
        if not isinstance(self.gid, str) or not _GID.fullmatch(self.gid):
            raise KeyExchangeError(f"gid={self.gid!r} is not 8 groups of 4 lowercase hex digits")


@dataclass(frozen=True, slots=True)
class RegionInfo(_Message):
    """The server's registered memory: slots of `slot_bytes` from `addr`, readable with `rkey`."""

    addr: int
    rkey: int
    length: int
    slot_bytes: int

    _limits = {"addr": _U64, "rkey": _U32, "length": _U64, "slot_bytes": _U64}

    def validate(self) -> None:
        _Message.validate(self)
        if self.slot_bytes == 0 or self.length < self.slot_bytes:
            raise KeyExchangeError(f"a region of {self.length} bytes cannot hold slots of {self.slot_bytes}")
        if self.addr + self.length > _U64:
            raise KeyExchangeError("region runs past the end of the address space")
