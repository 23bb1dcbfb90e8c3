"""Consistent hashing of block ids over the flash servers.

Each server owns many points (virtual nodes) on a 64-bit ring; a block
belongs to the servers met first walking clockwise from its own hash. Adding
or removing a server therefore moves only the blocks next to its points,
about 1/N of them, and virtual nodes keep every server's share close to 1/N.
"""

import bisect
from collections.abc import Container, Iterable

import xxhash

VNODES = 128


def _point(data: bytes) -> int:
    return xxhash.xxh3_64_intdigest(data)


class HashRing:
    def __init__(self, nodes: Iterable[str] = (), vnodes: int = VNODES) -> None:
        self.vnodes = vnodes
        self._points: list[tuple[int, str]] = []
        self._nodes: set[str] = set()
        for node in nodes:
            self.add(node)

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(self._nodes)

    def add(self, node: str) -> None:
        if node in self._nodes:
            return
        self._nodes.add(node)
        for i in range(self.vnodes):
            bisect.insort(self._points, (_point(f"{node}#{i}".encode()), node))

    def remove(self, node: str) -> None:
        self._nodes.discard(node)
        self._points = [p for p in self._points if p[1] != node]

    def owners(self, block_id: int, count: int, skip: Container[str] = ()) -> list[str]:
        """The first `count` distinct servers clockwise from the block, passing over `skip`."""
        wanted = min(count, len(self._nodes))
        found: list[str] = []
        if not wanted:
            return found
        start = bisect.bisect(self._points, (_point(block_id.to_bytes(8, "little")), ""))
        for i in range(len(self._points)):
            node = self._points[(start + i) % len(self._points)][1]
            if node not in found and node not in skip:
                found.append(node)
                if len(found) == wanted:
                    break
        return found
