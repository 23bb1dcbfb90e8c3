"""Reed-Solomon erasure coding of blocks (zfec): k data shards plus m parity shards.

A block is padded to a multiple of k, cut into k shards and extended by m
parity shards, each stored on a different server under its own id. Any k of
the k+m shards rebuild the block, so reads survive m servers down for 1+m/k
times the space, where replication would need m+1 copies.

Each shard starts with a header naming its block, its index, the code and the
block's length, so a shard is checked to belong to the block being rebuilt.
Shard ids have the top bit set; block ids come from a counter and never do.
"""

import struct

import xxhash

SHARD = struct.Struct("<QBBBxQ")  # block id, shard index, k, m, block length
_LOW63 = (1 << 63) - 1


class ErasureCode:
    def __init__(self, k: int, m: int) -> None:
        if not (1 <= k and 1 <= m and k + m <= 256):
            raise ValueError(f"RS({k},{m}) is not a usable code: need k >= 1, m >= 1, k + m <= 256")
        try:
            import zfec
        except ImportError:
            raise ImportError("erasure coding of the remote tier needs the zfec package") from None
        self.k, self.m = k, m
        self._encoder = zfec.Encoder(k, k + m)
        self._decoder = zfec.Decoder(k, k + m)

    @property
    def width(self) -> int:
        return self.k + self.m

    def shard_id(self, block_id: int, index: int) -> int:
        return (1 << 63) | (xxhash.xxh3_64_intdigest(block_id.to_bytes(8, "little") + bytes([index])) & _LOW63)

    def encode(self, block_id: int, data: bytes) -> list[bytes]:
        """The k+m shards of a block, each with its header."""
        size = max(1, -(-len(data) // self.k))
        padded = bytes(data).ljust(size * self.k, b"\0")
        pieces = tuple(padded[i * size:(i + 1) * size] for i in range(self.k))
        return [SHARD.pack(block_id, i, self.k, self.m, len(data)) + bytes(shard)
                for i, shard in enumerate(self._encoder.encode(pieces))]

    def decode(self, block_id: int, shards: dict[int, bytes]) -> bytes | None:
        """The block from any k valid shards (index -> shard as stored); None with fewer."""
        valid: dict[int, tuple[int, bytes]] = {}
        for index, raw in shards.items():
            if len(raw) >= SHARD.size:
                header = SHARD.unpack_from(raw)
                if header[:4] == (block_id, index, self.k, self.m):
                    valid[index] = (header[4], raw)
        shapes = {(length, len(raw)) for length, raw in valid.values()}
        if len(valid) < self.k or len(shapes) != 1:
            return None
        chosen = sorted(valid)[:self.k]
        pieces = self._decoder.decode(tuple(valid[i][1][SHARD.size:] for i in chosen), tuple(chosen))
        ((length, _),) = shapes
        return b"".join(pieces)[:length]
