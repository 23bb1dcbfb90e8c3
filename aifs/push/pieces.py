"""A file cut into the pieces a push job transforms one by one, in order: each block of the
file that the plan names, with the servers to ask first, and the rest (holes) in pieces
of at most a block that only the client can read."""

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Piece:
    file_offset: int
    length: int
    object_offset: int = 0  # where the piece starts in its block
    # (server, the block's id there) in the order to ask them; none: read through the mount
    places: tuple[tuple[str, int], ...] = ()


def _gap(start: int, end: int, block_size: int) -> list[Piece]:
    return [Piece(offset, min(block_size, end - offset)) for offset in range(start, end, block_size)]


def file_pieces(plan: dict[str, Any], block_size: int) -> list[Piece]:
    """The pieces of one file of the mount's plan (aifs.push.plan), covering its bytes once."""
    size, pieces, covered = plan["size"], [], 0
    for index, offset, length, places in plan["pieces"]:
        start = index * block_size
        end = min(start + length, size)
        if end <= covered:
            continue
        pieces += _gap(covered, start, block_size)
        pieces.append(Piece(start, end - start, offset, tuple((name, key) for name, key in places)))
        covered = end
    return pieces + _gap(covered, size, block_size)
