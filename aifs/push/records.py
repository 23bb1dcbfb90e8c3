"""JSON Lines records cut by block boundaries, and how the pieces are joined again.

A file's blocks are transformed where they are, one piece at a time, and a record that
crosses a boundary is whole in no piece. So each piece is split at its first and last
newline: the records between are transformed where the piece is, while the bytes before
the first newline (the end of a record begun earlier) and after the last (the start of one
that ends later) come back raw. The client joins each boundary's two halves into the one
record they are and transforms it itself. Every record is thus transformed exactly once,
in the file's order, and the output equals the transform of the whole file.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass

NEWLINE = b"\n"


def records(data: bytes) -> Iterator[bytes]:
    """Each record of `data` with its newline (the last one may have none)."""
    start = 0
    while start < len(data):
        end = data.find(NEWLINE, start)
        end = len(data) if end < 0 else end + 1
        yield data[start:end]
        start = end


@dataclass(frozen=True, slots=True)
class Split:
    head: bytes   # up to and including the first newline
    body: bytes   # whole records
    tail: bytes   # after the last newline
    whole: bool   # no newline at all: every byte belongs to one record

    @classmethod
    def of(cls, data: bytes) -> "Split":
        first = data.find(NEWLINE)
        if first < 0:
            return cls(data, b"", b"", True)
        last = data.rfind(NEWLINE)
        return cls(data[:first + 1], data[first + 1:last + 1], data[last + 1:], False)


class Stitcher:
    """Joins the answers for a file's pieces, in order, into the file's output: what each
    piece transformed, and the boundary records made whole and transformed here."""

    def __init__(self, transform: Callable[[bytes], bytes]) -> None:
        self._transform = transform
        self._carry = bytearray()  # the record open at the boundary so far

    def add(self, head: bytes, result: bytes, tail: bytes, whole: bool) -> bytes:
        """The output that this piece completes."""
        self._carry += head
        if whole:
            return b""
        joined = self._transform(bytes(self._carry)) if self._carry else b""
        self._carry = bytearray(tail)
        return joined + result

    def finish(self) -> bytes:
        """The output of the file's last record, when it has no newline."""
        last, self._carry = bytes(self._carry), bytearray()
        return self._transform(last) if last else b""
