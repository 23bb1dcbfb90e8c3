"""Unsealed bytes of one block, in memory that is reused from block to block.

Copying a 1 MiB write into a new bytearray costs about 0.8 ms here, most of it
the kernel faulting in and zeroing fresh pages; into memory touched before it
costs about 0.1 ms. Large writers (checkpoints) fill block after block, so a
buffer that grows past `SMALL_BYTES` moves into a block-sized bytearray taken
from a pool, and goes back to the pool once its block is sealed. Small files
keep a plain bytearray of their own size: thousands of them may be open at once.
"""

SMALL_BYTES = 256 << 10
POOL_BYTES = 256 << 20  # idle pooled memory kept for the next writers


class BufferPool:
    """Block-sized bytearrays for reuse; single-threaded (the event loop owns it)."""

    def __init__(self, block_size: int, keep_bytes: int = POOL_BYTES) -> None:
        self.block_size = block_size
        self.keep = max(keep_bytes // block_size, 1)
        self._idle: list[bytearray] = []

    def take(self) -> bytearray:
        return self._idle.pop() if self._idle else bytearray(self.block_size)

    def give(self, data: bytearray) -> None:
        if len(self._idle) < self.keep:
            self._idle.append(data)


class BlockBuffer:
    """Bytes [0, length) of a block being written; the rest of `data` is scratch.

    A pooled buffer's bytes past `length` may hold an earlier block's data, so
    every write that starts past the end zero-fills the gap first.
    """

    __slots__ = ("data", "length", "pooled", "_pool")

    def __init__(self, pool: BufferPool, content: bytes | memoryview = b"") -> None:
        self._pool = pool
        self.pooled = False  # True: `data` goes back to the pool at release and must not be kept
        self.data = bytearray()
        self.length = 0
        if content:
            self.write(0, memoryview(content))

    def __len__(self) -> int:
        return self.length

    def write(self, within: int, view: memoryview) -> None:
        end = within + len(view)
        if end > len(self.data):
            self._grow(end)
        if within > self.length:
            self.data[self.length:within] = bytes(within - self.length)
        self.data[within:end] = view
        self.length = max(self.length, end)

    def _grow(self, end: int) -> None:
        if not self.pooled and SMALL_BYTES < end <= self._pool.block_size:
            bigger = self._pool.take()
            bigger[:self.length] = memoryview(self.data)[:self.length]
            self.data, self.pooled = bigger, True
        else:
            self.data.extend(bytes(end - len(self.data)))

    def truncate(self, length: int) -> None:
        self.length = min(self.length, length)
        if not self.pooled:
            del self.data[self.length:]

    def view(self) -> memoryview:
        return memoryview(self.data)[:self.length]

    def copy(self, lo: int, hi: int) -> bytes:
        return bytes(memoryview(self.data)[lo:min(hi, self.length)])

    def release(self) -> None:
        """The block is sealed (or cut off): pooled memory goes back for the next block."""
        if self.pooled:
            self._pool.give(self.data)
            self.pooled = False
        self.data = bytearray()
        self.length = 0
