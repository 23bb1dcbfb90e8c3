"""The regular files of a tree, found through directory descriptors.

Each directory is opened relative to its parent's descriptor and listed through its own,
so no call ever takes a path longer than one name: trees whose paths pass PATH_MAX (4096
bytes) are walked whole. One descriptor is open per level of depth. Whatever cannot be
read is named, with the reason, and the walk goes on.
"""

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


@dataclass
class _Directory:
    fd: int
    path: str
    subdirs: list[str] = field(default_factory=list)  # names not visited yet


class TreeWalk:
    """Iterating yields (inode, size) of every regular file at or below `top`; afterwards
    `unreadable` lists "path: reason" for each entry that could not be read."""

    def __init__(self, top: Path) -> None:
        self.top = top
        self.unreadable: list[str] = []

    def __iter__(self) -> Iterator[tuple[int, int]]:
        if not self.top.is_dir():
            st = self.top.stat()
            yield st.st_ino, st.st_size
            return
        stack = [_Directory(os.open(self.top, os.O_RDONLY | os.O_DIRECTORY), str(self.top))]
        try:
            yield from self._list(stack[-1])
            while stack:
                here = stack[-1]
                if not here.subdirs:
                    os.close(stack.pop().fd)
                    continue
                name = here.subdirs.pop()
                try:
                    child = _Directory(os.open(name, DIRECTORY, dir_fd=here.fd), f"{here.path}/{name}")
                except OSError as e:
                    self.unreadable.append(f"{here.path}/{name}: {e.strerror}")
                    continue
                stack.append(child)
                yield from self._list(child)
        finally:
            for directory in stack:
                os.close(directory.fd)

    def _list(self, directory: _Directory) -> Iterator[tuple[int, int]]:
        """The regular files of one directory; its subdirectories are noted for later."""
        try:
            with os.scandir(directory.fd) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            directory.subdirs.append(entry.name)
                        elif entry.is_file(follow_symlinks=False):
                            st = entry.stat(follow_symlinks=False)
                            yield st.st_ino, st.st_size
                    except OSError as e:
                        self.unreadable.append(f"{directory.path}/{entry.name}: {e.strerror}")
        except OSError as e:
            self.unreadable.append(f"{directory.path}: {e.strerror}")
