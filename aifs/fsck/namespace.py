"""An index of the namespace for the checks, built by streaming sweeps over the I and D keys.

Only sets and counters of inode numbers are kept (plus one entry per directory), never
decoded inodes, so a volume of millions of files fits in memory.
"""

import stat
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from aifs.meta import MetaEngine, keys
from aifs.meta.attrs import Inode
from aifs.meta.engine import ROOT_INO
from aifs.meta.kv import KVStore
from aifs.fsck.report import show_name

Entry = tuple[int, bytes]


def split_dentry(key: bytes, value: bytes) -> tuple[int, bytes, int]:
    """(parent, name, child) of one D key."""
    return keys.read_u64(key, 1), key[9:], keys.read_u64(value)


@dataclass
class Namespace:
    """Which inodes exist, and how the valid entries (in an existing directory, naming an
    existing inode) link them. A directory keeps one entry; any further ones are `extra`."""

    inodes: dict[int, int] = field(default_factory=dict)  # inode -> its file type (S_IFMT bits)
    dirs: dict[int, int] = field(default_factory=dict)  # directory -> parent its inode records
    allocated: set[int] = field(default_factory=set)  # inodes whose alloc is not 0
    names: Counter[int] = field(default_factory=Counter)
    subdirs: Counter[int] = field(default_factory=Counter)
    entry: dict[int, Entry] = field(default_factory=dict)
    extra: list[tuple[int, bytes, int]] = field(default_factory=list)
    dentries: int = 0

    @classmethod
    def build(cls, kv: KVStore) -> "Namespace":
        ns = cls()
        ns._read_inodes(kv)
        ns._read_dentries(kv)
        return ns

    def _read_inodes(self, kv: KVStore) -> None:
        for key, value in kv.scan(keys.INODE):
            ino, node = keys.read_u64(key, 1), Inode.decode(value)
            self.inodes[ino] = stat.S_IFMT(node.mode)
            if node.alloc:
                self.allocated.add(ino)
            if node.is_dir:
                self.dirs[ino] = node.parent

    def _read_dentries(self, kv: KVStore) -> None:
        for key, value in kv.scan(keys.DENTRY):
            self.dentries += 1
            parent, name, child = split_dentry(key, value)
            if self.valid(parent, child):
                self._count(parent, name, child)

    def valid(self, parent: int, child: int) -> bool:
        return parent in self.dirs and child in self.inodes

    def _count(self, parent: int, name: bytes, child: int) -> None:
        self.names[child] += 1
        if child not in self.dirs:
            return
        kept = self.entry.get(child)
        if child == ROOT_INO or (kept is not None and not self._prefer(child, parent, kept)):
            self.extra.append((parent, name, child))
            return
        if kept is not None:
            self.extra.append((*kept, child))
            self.subdirs[kept[0]] -= 1
        self.entry[child] = (parent, name)
        self.subdirs[parent] += 1

    def _prefer(self, child: int, parent: int, kept: Entry) -> bool:
        """Of two entries naming one directory, keep the one its `parent` field agrees with."""
        return parent == self.dirs[child] != kept[0]

    def walk(self, meta: MetaEngine, top: int, reached: set[int]) -> None:
        """Add `top` and everything below it to `reached` (a prefix scan per directory)."""
        reached.add(top)
        stack = [top] if top in self.dirs else []
        while stack:
            for _, child in meta.readdir(stack.pop()):
                if child in self.inodes and child not in reached:
                    reached.add(child)
                    if child in self.dirs:
                        stack.append(child)

    def path(self, ino: int) -> str:
        """The path of a directory by its kept entries; `<inode N>` starts a path cut off from root."""
        parts: list[str] = []
        seen: set[int] = set()
        while ino != ROOT_INO:
            if ino not in self.entry or ino in seen:
                return "/".join([f"<inode {ino}>", *reversed(parts)])
            seen.add(ino)
            ino, name = self.entry[ino]
            parts.append(show_name(name))
        return "/" + "/".join(reversed(parts))

    def entry_path(self, parent: int, name: bytes) -> str:
        base = self.path(parent)
        return f"{base.rstrip('/')}/{show_name(name)}"

    def file_paths(self, kv: KVStore, inos: Iterable[int]) -> dict[int, str]:
        """A path for each of `inos`, found in one sweep of the D keys; unnamed ones get `<inode N>`."""
        wanted = set(inos)
        paths: dict[int, str] = {}
        if wanted:
            for key, value in kv.scan(keys.DENTRY):
                parent, name, child = split_dentry(key, value)
                if child in wanted and child not in paths and self.valid(parent, child):
                    paths[child] = self.entry_path(parent, name)
        return {ino: paths.get(ino, f"<inode {ino}>") for ino in wanted}
