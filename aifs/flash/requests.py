"""A block server's requests, checked field by field before any of them reaches the store.

A header is whatever msgpack map the client sent: a field of the wrong type or
out of range (a negative offset would read the record before the block) is an
error answer naming the field, never a store call with it.
"""

from dataclasses import dataclass
from typing import Any

from aifs.rdma.wire import DELETE, GET, HAS, LOCATE, PUT, QP, STAT, UNPIN

TRANSFORM = "transform"  # run a built-in transform over part of a block, answer the result (aifs.push)
_U64 = (1 << 64) - 1
_NEEDS_ID = (GET, PUT, DELETE, HAS, UNPIN, LOCATE, TRANSFORM)
OPS = (GET, PUT, DELETE, HAS, STAT, UNPIN, QP, LOCATE, TRANSFORM)


class BadRequest(ValueError):
    """A request the server cannot serve as sent; the message names the field."""


@dataclass(frozen=True, slots=True)
class Request:
    op: str
    block_id: int = 0
    offset: int = 0
    length: int = -1       # -1: to the end of the block
    checksum: int = 0      # a put's: what its bytes must hash to
    pin: bool = False
    qp: Any = None         # the client's queue pair (verbs key exchange), checked by QpInfo
    job: Any = None        # a transform's {"name": str, "args": map}, checked by aifs.push.serving


def _integer(header: dict[str, Any], name: str, low: int, high: int, default: int | None = None) -> int:
    value = header.get(name, default)
    if value is None:
        raise BadRequest(f"{header.get('op')} needs {name!r}")
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadRequest(f"{name}={value!r:.40} is not an integer in [{low}, {high}]")
    return value


def _flag(header: dict[str, Any], name: str) -> bool:
    value = header.get(name, False)
    if not isinstance(value, bool):
        raise BadRequest(f"{name}={value!r:.40} is not true or false")
    return value


def _job(header: dict[str, Any]) -> dict[str, Any]:
    job = header.get("job")
    if not (isinstance(job, dict) and isinstance(job.get("name"), str) and isinstance(job.get("args"), dict)):
        raise BadRequest(f"job={job!r:.40} is not {{'name': transform, 'args': {{...}}}}")
    return job


def parse(header: dict[str, Any]) -> Request:
    """The request in `header`; raises BadRequest."""
    op = header.get("op")
    if op not in OPS:
        raise BadRequest(f"unknown op {op!r:.40}")
    block_id = _integer(header, "id", 0, _U64) if op in _NEEDS_ID else 0
    if op == GET:
        return Request(op, block_id, _integer(header, "off", 0, _U64, 0), _integer(header, "len", -1, _U64, -1))
    if op == TRANSFORM:
        return Request(op, block_id, _integer(header, "off", 0, _U64, 0), _integer(header, "len", -1, _U64, -1),
                       job=_job(header))
    if op == PUT:
        return Request(op, block_id, checksum=_integer(header, "sum", 0, _U64), pin=_flag(header, "pin"))
    return Request(op, block_id, qp=header.get("qp"))
