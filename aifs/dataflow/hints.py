"""The reader's side of sample-order prefetch: each file's mount and inode, found once by stat(),
and hints of an order sent to each mount's control socket (aifs.vfs.orderhints).

A hint is advice: the files are read the same with or without it. Several readers on a node
each hint their own order under their own reader id; a new hint from a reader replaces its
last one on that mount.
"""

import itertools
import os
import secrets
from collections.abc import Iterable, Sequence
from pathlib import Path

from aifs.client.client import AnyPath
from aifs.control.client import ControlClient, mount_of

DEFAULT_TIMEOUT_S = 60.0
_PROCESS = secrets.token_hex(4)  # process ids repeat across the containers of a node
_readers = itertools.count()


def process_reader() -> str:
    """The reader id of this process's one-shot hints (`prefetch`)."""
    return f"{os.getpid()}-{_PROCESS}"


class OrderHint:
    """Hints over a fixed list of files, by one reader: each path is resolved on the first hint,
    so later hints (an epoch each) cost one message per mount."""

    def __init__(self, paths: Sequence[AnyPath], reader: str | None = None, files_ahead: int | None = None,
                 bytes_ahead: int | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        """`reader`: the id the mounts know this reader by (by default one of its own);
        `files_ahead`, `bytes_ahead`: how far ahead to fetch, at most the mount's [prefetch]
        settings (by default those)."""
        self.paths = list(paths)
        self.reader = reader if reader is not None else f"{process_reader()}-{next(_readers)}"
        self.budgets = {key: value for key, value in (("files_ahead", files_ahead), ("bytes_ahead", bytes_ahead))
                        if value is not None}
        self.timeout = timeout
        self._mounts: list[ControlClient] = []
        self._located: list[tuple[int, int]] | None = None  # per path: (index into _mounts, inode)

    def send(self, order: Iterable[int] | None = None) -> list[dict]:
        """Hint that the files will be read in `order` (indices into the paths; by default as
        listed); the replies of the mounts that hold any of them. A mount that holds none of
        them forgets this reader's earlier hint."""
        located = self._locate()
        inodes: list[list[int]] = [[] for _ in self._mounts]
        for index in range(len(self.paths)) if order is None else order:
            if not 0 <= index < len(located):
                raise IndexError(f"the order names file {index}, and there are {len(located)} paths")
            mount, ino = located[index]
            inodes[mount].append(ino)
        replies = []
        for client, hinted in zip(self._mounts, inodes):
            if hinted:
                replies.append(client.call("prefetch_hint", reader=self.reader, inodes=hinted, **self.budgets))
            else:
                client.call("prefetch_end", reader=self.reader)
        return replies

    def end(self) -> None:
        """Forget this reader's hints on every mount: fetches of files it has not read stop."""
        for client in self._mounts:
            client.call("prefetch_end", reader=self.reader)

    def _locate(self) -> list[tuple[int, int]]:
        """Each path's mount and inode; raises OSError for a path that cannot be stat()ed and
        ControlError for one on no aifs mount."""
        if self._located is None:
            by_device: dict[int, int] = {}
            located = []
            for path in self.paths:
                st = os.stat(path)
                if st.st_dev not in by_device:
                    by_device[st.st_dev] = len(self._mounts)
                    state_dir = mount_of(Path(os.fsdecode(path))).state_dir
                    self._mounts.append(ControlClient(state_dir, self.timeout))
                located.append((by_device[st.st_dev], st.st_ino))
            self._located = located
        return self._located


def prefetch(paths: Iterable[AnyPath], files_ahead: int | None = None, bytes_ahead: int | None = None) -> list[dict]:
    """Hint that these files will be read in this order, in place of this process's last
    `prefetch`: each mount fetches ahead of the reads (docs/prefetch.md). The mounts' replies."""
    return OrderHint(list(paths), process_reader(), files_ahead, bytes_ahead).send()
