"""Block checksums: xxh3-64, fast enough to verify every block that comes back from below RAM."""

import xxhash


def checksum(data: bytes | memoryview) -> int:
    return xxhash.xxh3_64_intdigest(data)


class CorruptBlock(Exception):
    """Bytes of a block did not match its checksum; names the block and the tier."""

    def __init__(self, block_id: int, tier: str) -> None:
        super().__init__(f"block {block_id:016x} from tier {tier} failed its checksum")
        self.block_id = block_id
        self.tier = tier
