"""The portable dump of a metadata engine: one msgpack stream that any engine can load.

The stream is a sequence of msgpack objects:

    header   {"format": "aifs-meta-dump", "version": 1, "volume": {"uuid", "block_size", "format"}}
    record   [key, value] for every plain key: tag by tag, each tag in key order
    trailer  {"end": "aifs-meta-dump", "counters": {name: value}, "counts": [[tag, keys], ...],
              "checksum": xxh3-128 hex}

Keys ascend strictly from the first record to the last, so a dump of one volume is the same
from every engine. The counters come last because they are read last: an id is reserved
before it is used, so counters read after the records are never below an id the records
hold, even when nodes wrote to the volume during the dump. The checksum covers the header,
every record, the counters and the counts, so a dump cut short or changed anywhere is refused.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import msgpack
import xxhash

from aifs.meta import contents, keys
from aifs.meta.kv import KVStore

FORMAT = "aifs-meta-dump"
VERSION = 1


class DumpError(Exception):
    """A dump that cannot be loaded: not a dump, a newer version, cut short or damaged."""


class NoVolume(Exception):
    """The engine holds no volume record: there is no volume to dump."""


@dataclass
class Trailer:
    """What a dump holds besides its records, and how many records of each tag."""

    counters: dict[str, int] = field(default_factory=dict)
    counts: dict[bytes, int] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        """`12 keys (C 1, D 5, I 6)`: the count of each tag, by its letter."""
        tags = ", ".join(f"{tag.decode('latin-1')} {n}" for tag, n in sorted(self.counts.items()))
        return f"{self.records} keys ({tags})"

    def covered(self) -> list:
        """The part of the trailer that its checksum covers."""
        return [self.counters, [[tag, n] for tag, n in sorted(self.counts.items())]]


def read_volume(kv: KVStore) -> dict[str, Any]:
    """The engine's volume record (uuid, block_size, format); NoVolume when there is none."""
    stored = kv.get_fresh(keys.VOLUME)
    if stored is None:
        raise NoVolume("it holds no aifs volume")
    return msgpack.unpackb(stored)


def write_dump(kv: KVStore, out: BinaryIO, advance: Callable[[int], None] = lambda n: None) -> Trailer:
    """Write everything `kv` holds to `out`; `advance` hears of each record written."""
    digest = xxhash.xxh3_128()

    def emit(item: Any) -> None:
        packed = msgpack.packb(item)
        digest.update(packed)
        out.write(packed)

    emit({"format": FORMAT, "version": VERSION, "volume": read_volume(kv)})
    trailer = Trailer()
    for key, value in contents.plain_items(kv):
        emit([key, value])
        trailer.counts[key[:1]] = trailer.counts.get(key[:1], 0) + 1
        advance(1)
    trailer.counters = contents.counters(kv)
    counters, counts = trailer.covered()
    digest.update(msgpack.packb([counters, counts]))
    out.write(msgpack.packb({"end": FORMAT, "counters": counters, "counts": counts,
                             "checksum": digest.hexdigest()}))
    return trailer


class DumpReader:
    """Reads a dump from a stream: the header at once, the records as they are asked for, and
    the trailer after the last record, checked against everything read before it."""

    def __init__(self, stream: BinaryIO, name: str) -> None:
        self._name = name
        self._unpacker = msgpack.Unpacker(stream, raw=False)
        self._digest = xxhash.xxh3_128()
        self.trailer: Trailer | None = None
        self._volume_seen = False
        self.volume = self._header()

    def _next(self, what: str) -> Any:
        """The next object of the stream, `what` it should be; DumpError when there is none."""
        try:
            return next(self._unpacker)
        except StopIteration:
            raise DumpError(f"{self._name} ends at byte {self._unpacker.tell()} before its {what}: "
                            "the dump was cut short (an interrupted dump, or a partial copy)") from None
        except (ValueError, msgpack.UnpackException) as e:
            raise self._damaged(f"its {what} cannot be decoded ({e})") from None

    def _damaged(self, what: str) -> DumpError:
        return DumpError(f"{self._name} is damaged near byte {self._unpacker.tell()}: {what}")

    def _header(self) -> dict[str, Any]:
        header = self._next("header")
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise DumpError(f"{self._name} is not an aifs metadata dump (one made by `aifs meta dump`)")
        if header.get("version") != VERSION:
            raise DumpError(f"{self._name} is a dump of format version {header.get('version')!r}; this aifs "
                            f"reads version {VERSION}: load it with the aifs release that made it")
        volume = header.get("volume")
        if not (isinstance(volume, dict) and isinstance(volume.get("uuid"), str)
                and all(isinstance(volume.get(name), int) for name in ("block_size", "format"))):
            raise self._damaged("its header names no volume (uuid, block_size, format)")
        self._digest.update(msgpack.packb(header))
        return volume

    def records(self) -> Iterator[tuple[bytes, bytes]]:
        """Every record in order; after the last one the trailer is read and checked."""
        counts: dict[bytes, int] = {}
        previous = b""
        while not isinstance(item := self._next("trailer"), dict):
            key, value = self._record(item, previous)
            counts[key[:1]] = counts.get(key[:1], 0) + 1
            previous = key
            yield key, value
        self.trailer = self._trailer(item, counts)

    def _record(self, item: Any, previous: bytes) -> tuple[bytes, bytes]:
        if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, bytes) for x in item)):
            raise self._damaged("a record that is not a [key, value] pair of byte strings")
        key, value = item
        if key <= previous:
            raise self._damaged(f"key {key!r} does not follow {previous!r} in key order")
        if key in contents.COUNTER_KEYS:
            raise self._damaged(f"counter {key!r} appears as a plain record")
        if key == keys.VOLUME:
            self._check_volume_record(value)
        self._digest.update(msgpack.packb(item))
        return key, value

    def _check_volume_record(self, value: bytes) -> None:
        try:
            same = msgpack.unpackb(value) == self.volume
        except (ValueError, msgpack.UnpackException):
            same = False
        if not same:
            raise self._damaged("its volume record differs from its header")
        self._volume_seen = True

    def _trailer(self, end: dict[str, Any], counts: dict[bytes, int]) -> Trailer:
        """The trailer `end`, once it matches everything read before it and ends the stream."""
        trailer = self._parse_trailer(end)
        self._digest.update(msgpack.packb(trailer.covered()))
        if end.get("checksum") != self._digest.hexdigest():
            raise self._damaged("its checksum does not match its contents (the dump was changed or corrupted)")
        if trailer.counts != counts:
            raise self._damaged(f"its trailer counts {trailer.summary()}, "
                                f"but it holds {Trailer(counts=counts).summary()}")
        if not self._volume_seen:
            raise self._damaged("it holds no volume record")
        if self._unpacker.read_bytes(1):
            raise self._damaged("data follows its trailer")
        unknown = sorted(set(trailer.counters) - {name.decode() for name in keys.COUNTERS})
        if unknown:
            raise DumpError(f"{self._name} holds counters this aifs does not know ({', '.join(unknown)}): "
                            "load it with the aifs release that made it")
        return trailer

    def _parse_trailer(self, end: dict[str, Any]) -> Trailer:
        counters, counts = end.get("counters"), end.get("counts")
        if (end.get("end") != FORMAT or not isinstance(counters, dict) or not isinstance(counts, list)
                or not all(isinstance(name, str) and isinstance(n, int) for name, n in counters.items())
                or not all(isinstance(c, list) and len(c) == 2 and isinstance(c[0], bytes)
                           and isinstance(c[1], int) for c in counts)):
            raise self._damaged("an object that is neither a record nor a well-formed trailer")
        return Trailer(counters, dict(counts))


def verify_dump(stream: BinaryIO, name: str) -> DumpReader:
    """Read a whole dump and check it; the reader then holds its volume and trailer."""
    reader = DumpReader(stream, name)
    for _ in reader.records():
        pass
    return reader
