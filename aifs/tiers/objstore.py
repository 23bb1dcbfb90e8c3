"""A local-directory object store: the durable bottom tier of a single machine.

It speaks the same protocol as the S3 tier, so the write-back path is the same;
every put is durable (fsynced file and folder) before it returns.
"""

import os
from pathlib import Path

from aifs.tiers.files import make_fanout, read_file, remove_file, write_file
from aifs.tiers.protocol import object_name


class LocalObjectStore:
    name = "objstore"

    def __init__(self, root: Path, capacity: int) -> None:
        self.root = root
        self.capacity = capacity
        make_fanout(root)
        self._used = sum(
            entry.stat().st_size
            for fanout in os.scandir(root)
            for entry in os.scandir(fanout.path)
        )

    def _path(self, block_id: int) -> Path:
        return self.root / object_name(block_id)

    def get(self, block_id: int) -> bytes | None:
        return read_file(self._path(block_id))

    def put(self, block_id: int, data: bytes) -> None:
        path = self._path(block_id)
        if path.exists():
            return
        write_file(path, data, durable=True)
        self._used += len(data)

    def delete(self, block_id: int) -> None:
        self._used -= remove_file(self._path(block_id))

    def contains(self, block_id: int) -> bool:
        return self._path(block_id).exists()

    def used(self) -> int:
        return self._used

    def block_ids(self) -> list[int]:
        """Every object held, for fsck's search for unreferenced blocks."""
        return [
            int(entry.name, 16)
            for fanout in os.scandir(self.root)
            for entry in os.scandir(fanout.path)
            if not entry.name.endswith(".tmp")
        ]
