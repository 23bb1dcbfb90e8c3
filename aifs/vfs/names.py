"""Where inodes were last seen in the namespace, so per-path rules can apply to an open file.

FUSE names files by inode; rules in the config name paths. The kernel looks up
every path component before it uses an inode, so remembering (parent, name) from
lookups and creations gives the path of anything the kernel can hand us.
"""

from aifs.meta.engine import ROOT_INO


class NameCache:
    def __init__(self) -> None:
        self._names: dict[int, tuple[int, bytes]] = {}

    def remember(self, ino: int, parent: int, name: bytes) -> None:
        if ino != ROOT_INO and name not in (b".", b".."):
            self._names[ino] = (parent, name)

    def moved(self, old_parent: int, old_name: bytes, ino: int, new_parent: int, new_name: bytes) -> None:
        if self._names.get(ino) == (old_parent, old_name):
            self._names[ino] = (new_parent, new_name)

    def path_of(self, ino: int) -> str | None:
        """The absolute path inside the mount, or None when some ancestor was never seen."""
        parts = []
        seen = set()
        while ino != ROOT_INO:
            if ino in seen or ino not in self._names:
                return None
            seen.add(ino)
            ino, name = self._names[ino]
            parts.append(name.decode(errors="surrogateescape"))
        return "/" + "/".join(reversed(parts))
