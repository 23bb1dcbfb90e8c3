"""Unsealed bytes of one block, with as few copies as the writes allow.

Large sequential writers (checkpoints) send 1 MiB writes whose bytes objects are
never changed again, so a block written front to back in pieces of at least
`SMALL_BYTES` is kept as the list of those pieces, and staged to NVMe with one
gathering write: no copy at all here. Any other write pattern gathers the bytes
into one bytearray. Copying a 1 MiB write into a new bytearray costs about
0.8 ms here, most of it the kernel faulting in and zeroing fresh pages, and into
memory touched before about 0.1 ms; so a bytearray that grows past `SMALL_BYTES`
moves into a block-sized one taken from a pool, and goes back to the pool once
its block is sealed. Small files keep a plain bytearray of their own size:
thousands of them may be open at once.
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
    """Bytes [0, length) of a block being written: `pieces` while it is written front to
    back in large pieces, else the first `length` bytes of `data` (the rest is scratch).

    A pooled buffer's bytes past `length` may hold an earlier block's data, so
    every write that starts past the end zero-fills the gap first.
    """

    __slots__ = ("data", "length", "pooled", "pieces", "_pool")

    def __init__(self, pool: BufferPool, content: bytes | memoryview = b"") -> None:
        self._pool = pool
        self.pooled = False  # True: `data` goes back to the pool at release and must not be kept
        self.pieces: list[memoryview] = []
        self.data = bytearray()
        self.length = 0
        if content:
            self.write(0, memoryview(content))

    def __len__(self) -> int:
        return self.length

    @property
    def private(self) -> bool:
        """True when `data` alone holds the block and is this buffer's own (not pooled): it may
        become the block kept in RAM, since it is never written again once sealed."""
        return not self.pooled and not self.pieces

    def write(self, within: int, view: memoryview) -> None:
        """`view` must not change afterwards (the bytes of a FUSE write request never do)."""
        appending = within == self.length and (self.pieces or not self.data)
        if appending and len(view) >= SMALL_BYTES and isinstance(view.obj, bytes):
            self.pieces.append(view)
            self.length += len(view)
            return
        self._gather()
        end = within + len(view)
        if end > len(self.data):
            self._grow(end)
        if within > self.length:
            self.data[self.length:within] = bytes(within - self.length)
        self.data[within:end] = view
        self.length = max(self.length, end)

    def _gather(self) -> None:
        """Leave piece mode: copy the pieces into one bytearray."""
        if not self.pieces:
            return
        pieces, self.pieces, self.length = self.pieces, [], 0
        self._grow(sum(map(len, pieces)))
        for piece in pieces:
            self.data[self.length:self.length + len(piece)] = piece
            self.length += len(piece)

    def _grow(self, end: int) -> None:
        if not self.pooled and SMALL_BYTES < end <= self._pool.block_size:
            bigger = self._pool.take()
            bigger[:self.length] = memoryview(self.data)[:self.length]
            self.data, self.pooled = bigger, True
        else:
            self.data.extend(bytes(end - len(self.data)))

    def truncate(self, length: int) -> None:
        if length < self.length:
            self._gather()
        self.length = min(self.length, length)
        if not self.pooled:
            del self.data[self.length:]

    def parts(self) -> list[memoryview]:
        """The block's bytes as buffers to write one after another."""
        return list(self.pieces) if self.pieces else [memoryview(self.data)[:self.length]]

    def copy(self, lo: int, hi: int) -> bytes:
        hi = min(hi, self.length)
        if not self.pieces:
            return bytes(memoryview(self.data)[lo:hi])
        out, start = [], 0
        for piece in self.pieces:
            end = start + len(piece)
            if end > lo and start < hi:
                out.append(piece[max(lo - start, 0):hi - start])
            start = end
        return b"".join(out)

    def release(self) -> None:
        """The block is sealed (or cut off): pooled memory goes back for the next block."""
        if self.pooled:
            self._pool.give(self.data)
            self.pooled = False
        self.pieces = []
        self.data = bytearray()
        self.length = 0
