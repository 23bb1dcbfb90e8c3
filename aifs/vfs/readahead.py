"""Readahead: spot sequential reads on an open file and say which blocks to fetch next.

The window (in blocks) starts at one when a file is read from its start or a
read continues where the last one ended, doubles each time the reader moves
into the next block, is capped per path (`readahead` rule), and collapses to
nothing on a random access. Blocks fetched ahead are remembered so that their
first real read does not count as a re-use in the RAM tier (a scan stays a scan).
Blocks the prefetcher had no room for yet are asked for again on the next read.
Once the reader has moved READ_THROUGH_KEPT blocks past a block fetched ahead, that
block leaves the RAM tier (unless re-used or pinned meanwhile): a stream then
reuses a few blocks' worth of memory instead of taking new memory for every block,
and the kernel's page cache and the NVMe tier still hold what it read.

"Where the last one ended" allows, once a stream is under way, a slack of one
FUSE request either way, for kernel readahead requests that arrive out of
order. A stream starts only at the file's start or exactly where the last read
ended: a random reader that lands a little ahead of its last read, by chance, is
still a random reader (and must not wait for whole blocks it never asked for).
"""

from collections import deque

DEFAULT_LIMIT = 32 << 20
SLACK = 1 << 20  # the largest FUSE read request
READ_THROUGH_KEPT = 2  # so the kernel's out-of-order reads of a block just left still find it


class Readahead:
    def __init__(self, block_size: int, limit: int = DEFAULT_LIMIT) -> None:
        self.bs = block_size
        self.max_blocks = limit // block_size
        self.window = 0
        self.last: int | None = None  # block index the last read ended in
        self.end: int | None = None  # byte offset the last read ended at
        self.ahead_to = -1  # highest block index already fetched ahead
        self.prefetched: set[int] = set()  # block ids fetched ahead, not yet read
        self._read_through: deque[int] = deque()  # block ids fetched ahead and read, oldest first

    def access(self, offset: int, end: int, blocks_in_file: int) -> range:
        """Record a read of [offset, end); the block indexes to fetch ahead now."""
        last = (end - 1) // self.bs
        previous, self.last = self.last, last
        ended, self.end = self.end, end
        if self.max_blocks == 0:
            return range(0)
        if offset == 0 if ended is None else self._continues(offset, ended):
            if previous is None or last > previous or self.window == 0:
                self.window = min(max(self.window * 2, 1), self.max_blocks)
        else:
            self.window, self.ahead_to = 0, last
            self.prefetched.clear()
            return range(0)
        start = max(self.ahead_to + 1, last + 1)
        stop = min(last + 1 + self.window, blocks_in_file)
        if start >= stop:
            return range(0)
        self.ahead_to = stop - 1
        return range(start, stop)

    def _continues(self, offset: int, ended: int) -> bool:
        return offset == ended or (self.window > 0 and abs(offset - ended) <= SLACK)

    def retry_from(self, index: int) -> None:
        """Blocks from `index` on could not be fetched ahead yet: the next read asks again."""
        self.ahead_to = min(self.ahead_to, index - 1)

    def first_read(self, block_id: int) -> bool:
        """True once for a block fetched ahead: its first demand read is not a re-use."""
        if block_id in self.prefetched:
            self.prefetched.discard(block_id)
            return True
        return False

    def left_behind(self, block_id: int) -> int | None:
        """The reader has started on `block_id`, fetched ahead: the block fetched ahead that
        it has now moved READ_THROUGH_KEPT blocks past, which need not stay in RAM."""
        self._read_through.append(block_id)
        if len(self._read_through) > READ_THROUGH_KEPT:
            return self._read_through.popleft()
        return None
