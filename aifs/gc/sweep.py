"""Which objects the metadata still needs: every block a block ref names, every queued
upload (U), every retired block not yet deleted (G), and every recorded pack (A).

Deliberately wider than fsck's idea of "referenced": a block ref whose inode is gone still
counts, because deleting bytes is the one step that cannot be undone; `aifs fsck --repair`
drops such refs first, and the next gc then finds their objects.
"""

from aifs.fsck.blocks import live_ids  # the scan fsck's pack check makes too
from aifs.meta.kv import KVStore
from aifs.meta.packs import pack_ids


def stray_ids(stored: list[int], kv: KVStore) -> list[int]:
    """Objects the durable tier holds that nothing in the metadata accounts for, in id order."""
    return sorted(set(stored) - live_ids(kv) - pack_ids(kv))
