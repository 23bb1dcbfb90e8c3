"""Deterministic block contents, shared by the tests and the client processes they start."""

import random


def content(block_id: int, size: int) -> bytes:
    return random.Random(block_id).randbytes(size)


def find_on_disk(root, data: bytes) -> tuple[str, int]:
    """(segment file, offset) of a block's bytes in a server's directory."""
    for path in sorted(root.rglob("seg-*.log")):
        offset = path.read_bytes().find(data)
        if offset >= 0:
            return str(path), offset
    raise LookupError("block bytes not found in any segment")


def flip_byte(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))
