"""Queues in the metadata keyed by block id, each value the time its entry may be handled."""

import time

import msgpack

from aifs.meta import keys
from aifs.meta.kv import KVStore


def due_in(kv: KVStore, tag: bytes, limit: int, now_ns: int | None) -> list[int]:
    """Blocks of a queue keyed by block id whose not-before time (the value) has come."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    due = []
    for key, value in kv.scan(tag):
        if msgpack.unpackb(value) <= now_ns:
            due.append(keys.read_u64(key, 1))
            if len(due) >= limit:
                break
    return due
