"""NVMe tier: block files in a local directory, a read cache and the write-back staging area.

A dirty block (not yet in the cold tier) is never evicted. The index of what is
held is rebuilt from the directory at start; which blocks are dirty is told by
the metadata's pending-upload queue.
"""

import os
from collections import OrderedDict
from pathlib import Path

from aifs.tiers.files import make_fanout, read_file, remove_file, sync_dir, sync_file, write_file
from aifs.tiers.protocol import object_name


class StagingFull(Exception):
    """No room for a dirty block even after evicting every clean one."""


class NvmeTier:
    name = "nvme"

    def __init__(self, root: Path, capacity: int) -> None:
        self.root = root
        self.capacity = capacity
        self._sizes: OrderedDict[int, int] = OrderedDict()
        self._dirty: set[int] = set()
        self._used = 0
        make_fanout(root)
        self._rebuild_index()

    def _rebuild_index(self) -> None:
        for fanout in os.scandir(self.root):
            for entry in os.scandir(fanout.path):
                if entry.name.endswith(".tmp"):
                    os.unlink(entry.path)
                    continue
                size = entry.stat().st_size
                self._sizes[int(entry.name, 16)] = size
                self._used += size

    def _path(self, block_id: int) -> Path:
        return self.root / object_name(block_id)

    def get(self, block_id: int) -> bytes | None:
        if block_id not in self._sizes:
            return None
        self._sizes.move_to_end(block_id)
        return read_file(self._path(block_id))

    def put(self, block_id: int, data: bytes, dirty: bool = False) -> None:
        """Store a block; a clean block that finds no room is simply not cached."""
        if block_id in self._sizes:
            return
        if not self._make_room(len(data)):
            if dirty:
                raise StagingFull(f"NVMe staging holds {self._used} of {self.capacity} bytes")
            return
        write_file(self._path(block_id), data, durable=False)
        self._sizes[block_id] = len(data)
        self._used += len(data)
        if dirty:
            self._dirty.add(block_id)

    def _make_room(self, size: int) -> bool:
        if self._used + size <= self.capacity:
            return True
        victims = (b for b in list(self._sizes) if b not in self._dirty)
        while self._used + size > self.capacity:
            victim = next(victims, None)
            if victim is None:
                return False
            self.delete(victim)
        return True

    def mark_dirty(self, block_id: int) -> None:
        if block_id in self._sizes:
            self._dirty.add(block_id)

    def mark_clean(self, block_id: int) -> None:
        self._dirty.discard(block_id)

    def is_dirty(self, block_id: int) -> bool:
        return block_id in self._dirty

    def sync(self, block_ids: list[int]) -> None:
        """Make staged blocks survive power loss: the files, then their folders."""
        folders = set()
        for block_id in block_ids:
            path = self._path(block_id)
            sync_file(path)
            folders.add(path.parent)
        for folder in folders:
            sync_dir(folder)

    def delete(self, block_id: int) -> None:
        size = self._sizes.pop(block_id, None)
        self._dirty.discard(block_id)
        if size is not None:
            remove_file(self._path(block_id))
            self._used -= size

    def contains(self, block_id: int) -> bool:
        return block_id in self._sizes

    def used(self) -> int:
        return self._used

    def dirty_bytes(self) -> int:
        return sum(self._sizes[b] for b in self._dirty)
