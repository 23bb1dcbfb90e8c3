"""What a mount serves its peers: the blocks in its own RAM and NVMe tiers, behind the
interface the flash block server expects of its store.

A peer's cache is the node's own: a block served is whatever copy the node reads itself
(its whole-block checksum is computed here, and the reader checks the bytes against the
checksum its metadata keeps, as for every tier below RAM), and a block offered by a peer
that read it from the durable tier lands on NVMe as a clean copy, evictable like any other.
Peers never pin, unpin or delete here: a node's tiers answer to its own mount, and a block
retired by garbage collection is never read again (ids are not reused) and ages out.

RAM is touched only from the calls the server makes on the mount's event loop (`size`,
`read_cached`, `contains`), never from its I/O threads: the RAM tier is not thread-safe.
A block held only in RAM and too large to be answered on the loop is therefore a miss.
"""

from aifs.flash.store import ChecksumMismatch, Record, Refused
from aifs.tiers.checksum import checksum
from aifs.tiers.manager import TierManager


class PeerStore:
    def __init__(self, tiers: TierManager) -> None:
        self._ram = tiers.ram
        self._nvme = tiers.nvme

    def size(self, block_id: int) -> int:
        """The block's length here (0 when not held); called on the event loop."""
        data = self._ram.get(block_id, promote=False)
        return len(data) if data is not None else self._nvme.bytes_of([block_id])

    def read_cached(self, block_id: int, offset: int = 0, length: int = -1) -> tuple[memoryview, int, int | None] | None:
        """From RAM, on the event loop; None sends the read to a thread (NVMe)."""
        data = self._ram.get(block_id, promote=False)
        return None if data is None else _answer(memoryview(data), offset, length)

    def read(self, block_id: int, offset: int = 0, length: int = -1) -> tuple[memoryview, int, int | None]:
        """From NVMe, on an I/O thread; KeyError when this node does not hold the block. A
        range is read alone: a small random read of a big block costs its own bytes only."""
        size = self._nvme.bytes_of([block_id])
        whole = offset <= 0 and not 0 <= length < size
        if whole:
            data = self._nvme.get(block_id)
        else:
            data = self._nvme.get_range(block_id, offset, None if length < 0 else length)
        if data is None:
            raise KeyError(block_id)
        return memoryview(data), size, checksum(data) if whole else None

    def put(self, block_id: int, record: Record, expected: int, pin: bool) -> None:
        """A block a peer read from the durable tier and this node is the place for."""
        if pin:
            raise Refused("a peer's tiers are a cache: they take no pinned blocks")
        if checksum(record.payload) != expected:
            raise ChecksumMismatch(f"block {block_id:016x} arrived damaged")
        self._nvme.put(block_id, bytes(record.payload))

    def contains(self, block_id: int) -> bool:
        return self._ram.contains(block_id) or self._nvme.contains(block_id)

    def delete(self, block_id: int) -> None:
        raise Refused("a peer's blocks leave its tiers by eviction, not at another node's request")

    def unpin(self, block_id: int) -> None:
        raise Refused("a peer's tiers hold no pins of other nodes")

    def stat(self) -> dict[str, int]:
        """Pinned counts pins of peers, which are none (this node's own pins are its own)."""
        return {"capacity": self._nvme.capacity, "used": self._nvme.used(), "blocks": len(self._nvme.block_ids()),
                "pinned": 0}


def _answer(data: memoryview, offset: int, length: int) -> tuple[memoryview, int, int | None]:
    """(the bytes asked for, the block's size, its checksum when the whole block is sent)."""
    size = len(data)
    if offset > 0 or 0 <= length < size:
        end = size if length < 0 else min(size, offset + length)
        return data[offset:end], size, None
    return data, size, checksum(data)
