"""Settling the damage a scan found in a segment: which records past a damaged header are
trusted, which damaged records get a header again, and which bytes are left as damaged regions.

Past a header that fails its check, records can no longer be found by walking from one to
the next, and a header found by searching the bytes may be one a user wrote inside a file.
So the walk goes on from the damaged header by three rules:

* a record whose header was found by searching is trusted only when its bytes match what
  the owner knows of its block (`trusted`: the checksum in the metadata, or the one a flash
  server's record carries); a record that follows a trusted one end to end is trusted too,
  as on the walk before the damage;
* a damaged record is recovered when the bytes behind it match the checksum of a block the
  owner still needs (`wanted`), for a length that the damaged header, the next header found,
  the end of the file or the owner (`lengths`) gives;
* the bytes that are neither form a damaged region.

A record is never taken for a block that already has a copy, so nothing found here replaces
(and kills) another record. A clean copy past the damage that cannot be verified is simply
not taken: the durable tier holds its block.
"""

from bisect import bisect_right
from itertools import islice
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aifs.tiers.checksum import checksum
from aifs.tiers.records import DEAD, HEADER, OLD_HEADER, STAGED, Header, Location, header_fields

Read = Callable[[int, int], bytes]  # (length, offset) -> bytes of the segment


@dataclass(frozen=True, slots=True)
class Found:
    """A record: its block, where its bytes are, and whether it is still staged."""

    block_id: int
    location: Location
    staged: bool


Trusted = Callable[[Found], bool]


@dataclass(frozen=True)
class DamagedRegion:
    """Bytes of a segment that hold no record that could be trusted or recovered."""

    path: Path
    segment: int
    start: int
    end: int
    says: tuple[int, int] | None  # (block id, length) its first bytes give when read as a header

    @property
    def says_block(self) -> int | None:
        return None if self.says is None else self.says[0]

    def describe(self) -> str:
        said = "" if self.says is None else f" (its header names block {self.says[0]:016x}, {self.says[1]} bytes)"
        return f"{self.path} bytes [{self.start}, {self.end}){said}"


@dataclass
class SegmentDamage:
    """What the scan of one segment leaves to settle: where its walk broke, and every sound
    header found after that point (some may lie inside other records' bytes)."""

    path: Path
    segment: int
    size: int
    start: int
    headers: list[tuple[int, Header]]


@dataclass
class Salvage:
    records: list[Found] = field(default_factory=list)     # trusted records past the damage
    recovered: list[Found] = field(default_factory=list)   # damaged records whose bytes matched: rewrite their headers
    regions: list[DamagedRegion] = field(default_factory=list)

    def extend(self, other: "Salvage") -> None:
        self.records += other.records
        self.recovered += other.recovered
        self.regions += other.regions


class Settler:
    """Settles the damaged segments of one log in turn; a block taken in one is held for the next."""

    def __init__(self, trusted: Trusted, wanted: Mapping[int, int], lengths: Mapping[int, int],
                 held: Container[int]) -> None:
        self.trusted = trusted
        self.held = held
        self.taken: set[int] = set()
        self.lengths = set(lengths.values())
        self._sum_of = {block_id: block_sum for block_id, block_sum in wanted.items() if block_id not in held}
        self._by_sum: dict[int, list[int]] = {}  # checksum -> blocks wanted and not held
        for block_id, block_sum in self._sum_of.items():
            self._by_sum.setdefault(block_sum, []).append(block_id)

    def has(self, block_id: int) -> bool:
        return block_id in self.held or block_id in self.taken

    def take(self, block_id: int) -> None:
        self.taken.add(block_id)
        block_sum = self._sum_of.pop(block_id, None)
        if block_sum is not None:
            self._by_sum[block_sum].remove(block_id)

    def match(self, data: bytes, named: int | None) -> int | None:
        """The wanted block `data` is, preferring the one a damaged header names (equal blocks share a checksum)."""
        ids = self._by_sum.get(checksum(data))
        if not ids:
            return None
        return named if named in ids else ids[0]

    @property
    def wants(self) -> bool:
        return bool(self._sum_of)

    def walk(self, damage: SegmentDamage, read: Read) -> Salvage:
        return _Walk(self, damage, read).run()


class _Walk:
    def __init__(self, settler: Settler, damage: SegmentDamage, read: Read) -> None:
        self.settler = settler
        self.damage = damage
        self.read = read
        self.headers = dict(damage.headers)
        self.offsets = [offset for offset, _ in damage.headers]
        self._verdicts: dict[int, bool] = {}

    def run(self) -> Salvage:
        out = Salvage()
        pos, chained = self.damage.start, False
        while pos < self.damage.size:
            header = self.headers.get(pos)
            if header is not None and (chained or self._acceptable(pos)):
                end = self._take(pos, header, out)
            elif (found := self._recover(pos)) is not None:
                out.recovered.append(found)
                end = found.location.end
            else:
                end = self._next_acceptable(pos)
                out.regions.append(self._region(pos, end))
                pos, chained = end, False
                continue
            pos, chained = end, True
        return out

    def _found(self, pos: int, header: Header) -> Found:
        location = Location(self.damage.segment, pos + header.size, header.length, header.size)
        return Found(header.block_id, location, header.state == STAGED)

    def _take(self, pos: int, header: Header, out: Salvage) -> int:
        """Index a trusted record unless it is dead or its block has a copy already; the end of its bytes."""
        if header.state != DEAD and not self.settler.has(header.block_id):
            self.settler.take(header.block_id)
            out.records.append(self._found(pos, header))
        return pos + header.size + header.length

    def _acceptable(self, pos: int) -> bool:
        """A searched-for header at `pos` whose record the owner verifies (verdicts are kept)."""
        verdict = self._verdicts.get(pos)
        if verdict is None:
            header = self.headers[pos]
            verdict = (header.state != DEAD and not self.settler.has(header.block_id)
                       and self.settler.trusted(self._found(pos, header)))
            self._verdicts[pos] = verdict
        return verdict

    def _next_acceptable(self, pos: int) -> int:
        """Where the next trusted header after `pos` starts, or the end of the file."""
        for offset in islice(self.offsets, bisect_right(self.offsets, pos), None):
            if self._acceptable(offset):
                return offset
        return self.damage.size

    def _recover(self, pos: int) -> Found | None:
        """A wanted block whose bytes lie behind a damaged header at `pos`."""
        if not self.settler.wants:
            return None
        says = header_fields(self.read(HEADER.size, pos))
        for size in (HEADER.size, OLD_HEADER.size):
            for length in self._lengths(pos, size, says):
                block_id = self.settler.match(self.read(length, pos + size), None if says is None else says[0])
                if block_id is not None:
                    self.settler.take(block_id)
                    return Found(block_id, Location(self.damage.segment, pos + size, length, size), False)
        return None

    def _lengths(self, pos: int, size: int, says: tuple[int, int] | None) -> list[int]:
        """Lengths the record at `pos` may have: what its header says, those the owner knows,
        and up to the next header found (the end of the file when none is)."""
        following = bisect_right(self.offsets, pos)
        end = self.offsets[following] if following < len(self.offsets) else self.damage.size
        lengths = {end - pos - size, *self.settler.lengths}
        if says is not None:
            lengths.add(says[1])
        return sorted(n for n in lengths if 0 < n <= self.damage.size - pos - size)

    def _region(self, start: int, end: int) -> DamagedRegion:
        says = header_fields(self.read(min(HEADER.size, end - start), start))
        return DamagedRegion(self.damage.path, self.damage.segment, start, end, says)
