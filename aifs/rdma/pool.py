"""Registered memory for RDMA READs, lent out in equal chunks.

Registering memory with the NIC is slow (it pins pages), so a client
registers one buffer once and lends chunks of it to reads: each RDMA READ
lands in a borrowed chunk, the bytes are checked and copied to the caller,
and the chunk goes back. A chunk the NIC may still write to (a READ that
timed out and could not be flushed) is retired instead of reused.
"""

import ctypes
import mmap
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager


class PoolExhausted(TimeoutError):
    """No chunk came free within the caller's timeout."""


def address_of(memory: bytearray | mmap.mmap) -> int:
    """The virtual address of a writable buffer (an mmap or bytearray), for the NIC."""
    return ctypes.addressof(ctypes.c_char.from_buffer(memory))


class Chunk:
    __slots__ = ("index", "offset", "view", "retired")

    def __init__(self, index: int, offset: int, view: memoryview) -> None:
        self.index = index
        self.offset = offset  # from the start of the pool's memory
        self.view = view
        self.retired = False

    def retire(self) -> None:
        """Never hand this chunk out again (the NIC may still write into it)."""
        self.retired = True


class BufferPool:
    def __init__(self, memory: bytearray | mmap.mmap, chunk_bytes: int) -> None:
        count = len(memory) // chunk_bytes if chunk_bytes > 0 else 0
        if count == 0:
            raise ValueError(f"{len(memory)} bytes hold no chunk of {chunk_bytes} bytes")
        self.memory = memory
        self.address = address_of(memory)
        self.chunk_bytes = chunk_bytes
        view = memoryview(memory)
        self._chunks = [Chunk(i, i * chunk_bytes, view[i * chunk_bytes:(i + 1) * chunk_bytes]) for i in range(count)]
        self._free = deque(self._chunks)
        self._cond = threading.Condition()

    @property
    def available(self) -> int:
        return len(self._free)

    @contextmanager
    def borrow(self, timeout: float) -> Iterator[Chunk]:
        with self._cond:
            if not self._cond.wait_for(lambda: self._free, timeout):
                raise PoolExhausted(f"no registered buffer came free within {timeout:.3g}s")
            chunk = self._free.popleft()
        try:
            yield chunk
        finally:
            if not chunk.retired:
                with self._cond:
                    self._free.append(chunk)
                    self._cond.notify()
