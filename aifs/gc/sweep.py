"""Which objects the metadata still needs: the live set is every block ref, every queued
upload (U) and every retired block not yet deleted (G).

Deliberately wider than fsck's idea of "referenced": a block ref whose inode is gone still
counts, because deleting bytes is the one step that cannot be undone; `aifs fsck --repair`
drops such refs first, and the next gc then finds their objects.
"""

from aifs.fsck.blocks import queued_ids  # the U / G scan fsck already has
from aifs.meta import keys
from aifs.meta.attrs import BlockRef
from aifs.meta.kv import KVStore


def referenced_ids(kv: KVStore) -> set[int]:
    """Objects some block ref points at (several refs may share one packed object)."""
    return {BlockRef.decode(value).block_id for _, value in kv.scan(keys.BLOCK)}


def live_ids(kv: KVStore) -> set[int]:
    return referenced_ids(kv) | queued_ids(kv, keys.UPLOAD) | queued_ids(kv, keys.GARBAGE)


def stray_ids(stored: list[int], kv: KVStore) -> list[int]:
    """Objects the durable tier holds that nothing in the metadata accounts for, in id order."""
    return sorted(set(stored) - live_ids(kv))
