"""A local-directory object store: the durable bottom tier of a single machine.

It speaks the same protocol as the S3 tier, so the write-back path is the same.
Puts are made durable in groups: `flush()` syncs the filesystem once for every
put before it, which costs far less than an fsync per object.
"""

import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

from aifs.tiers.files import make_fanout, read_file, remove_file, sync_filesystem, write_file
from aifs.tiers.protocol import OneObjectPerBlock, object_name

_OBJECT_NAME = re.compile(r"[0-9a-f]{16}")


class LocalObjectStore(OneObjectPerBlock):
    name = "objstore"
    marker_missing = False  # no marker: a local directory is named only by its own volume's config
    used_is_exact = True  # it counts what its folders hold

    def __init__(self, root: Path, capacity: int, read_only: bool = False) -> None:
        """`read_only` (fsck without --repair) creates nothing: a store never written to may lack
        its folders."""
        self.root = root
        self.capacity = capacity
        if not read_only:
            make_fanout(root)
        self._used = sum(entry.stat().st_size for entry in self._objects())
        self._used_lock = threading.Lock()  # puts and deletes run on several threads

    def _path(self, block_id: int) -> Path:
        return self.root / object_name(block_id)

    def get(self, block_id: int, demand: bool = False) -> bytes | None:
        return read_file(self._path(block_id))

    def get_range(self, block_id: int, offset: int, length: int, demand: bool = False) -> bytes | None:
        return read_file(self._path(block_id), offset, length)

    def put(self, block_id: int, data: bytes) -> None:
        grown = len(data) - write_file(self._path(block_id), data)
        with self._used_lock:
            self._used += grown

    def flush(self) -> None:
        """Make every earlier put survive power loss."""
        sync_filesystem(self.root)

    def close(self) -> None:
        """Nothing to release: every call opens and closes its own files."""

    def delete(self, block_id: int) -> None:
        freed = remove_file(self._path(block_id))
        with self._used_lock:
            self._used -= freed

    def delete_many(self, block_ids: list[int]) -> None:
        for block_id in block_ids:
            self.delete(block_id)

    def contains(self, block_id: int) -> bool:
        return self._path(block_id).exists()

    def used(self) -> int:
        return self._used

    def block_ids(self) -> list[int]:
        """Every object held, for fsck's search for unreferenced blocks."""
        return [int(entry.name, 16) for entry in self._objects()]

    def block_sizes(self) -> dict[int, int]:
        return {int(entry.name, 16): entry.stat().st_size for entry in self._objects()}

    def url(self, block_id: int | None = None) -> str:
        """Where an operator finds the store, or one of its objects."""
        return str(self.root if block_id is None else self._path(block_id))

    def _objects(self) -> Iterator[os.DirEntry]:
        """Object files; anything else an operator left in the folders is ignored."""
        if not self.root.is_dir():
            return
        for fanout in os.scandir(self.root):
            if fanout.is_dir():
                for entry in os.scandir(fanout.path):
                    if _OBJECT_NAME.fullmatch(entry.name):
                        yield entry
