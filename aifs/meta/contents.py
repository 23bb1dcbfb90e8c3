"""Everything a metadata engine holds, seen through the KV seam alone: its plain keys tag by
tag in key order, and its counters by name. What copies a volume between engines (aifs meta
dump and load), checks that an engine is empty, or empties it again, reads it this way, so
every engine is treated alike and no kind of record is left behind, including kinds this
module does not name.
"""

from collections.abc import Iterator

from aifs.meta import keys
from aifs.meta.kv import Batch, KVStore

TAGS = tuple(bytes([tag]) for tag in range(1, 256))  # every tag byte; 0x00 starts an engine's own keys, never ours
COUNTER_KEYS = {keys.counter(name): name for name in keys.COUNTERS}
CLEAR_BATCH = 1000  # keys deleted per batch when an engine is emptied


def plain_items(kv: KVStore) -> Iterator[tuple[bytes, bytes]]:
    """Every key and value but the counters, tag by tag, each tag in key order."""
    for tag in TAGS:
        for key, value in kv.scan(tag):
            if key not in COUNTER_KEYS:  # an engine that stores counters among its keys
                yield key, value


def counters(kv: KVStore) -> dict[str, int]:
    """Every counter by name, 0 for one never moved."""
    return {name.decode(): kv.counter(key) for key, name in COUNTER_KEYS.items()}


def count_plain(kv: KVStore) -> int:
    return sum(1 for _ in plain_items(kv))


def is_empty(kv: KVStore) -> bool:
    """No plain key, and every counter at 0: nothing a volume could be made of."""
    return next(plain_items(kv), None) is None and not any(counters(kv).values())


def clear(kv: KVStore) -> None:
    """Delete every plain key and move every counter back to 0: the engine is empty again."""
    batch = Batch()
    for key, _ in plain_items(kv):
        batch.delete(key)
        if len(batch.ops) >= CLEAR_BATCH:
            kv.commit(batch)
            batch = Batch()
    for key in COUNTER_KEYS:
        value = kv.counter(key)
        if value:
            batch.add(key, -value)
    kv.commit(batch)
