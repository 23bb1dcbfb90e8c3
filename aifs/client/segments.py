"""The segment files a root reader was handed (SCM_RIGHTS), kept open per connection.

Each costs a descriptor and keeps its file's disk space while the mount may have dropped it, so
at most MAX_HELD are kept: the least recently used is closed, and the server is told (the next
request's "forget") so that it hands that segment over again when an answer needs it.
"""

import os
from collections import OrderedDict

MAX_HELD = 256


class SegmentFiles:
    def __init__(self) -> None:
        self._fds: OrderedDict[int, int] = OrderedDict()
        self._forgotten: list[int] = []

    def __len__(self) -> int:
        return len(self._fds)

    def received(self, numbers: list[int], fds: list[int]) -> None:
        for number, fd in zip(numbers, fds):
            old = self._fds.pop(number, None)  # handed over again: the newer descriptor is right
            if old is not None:
                os.close(old)
            self._fds[number] = fd
        while len(self._fds) > MAX_HELD:
            self.drop(next(iter(self._fds)))

    def fd_of(self, number: int) -> int | None:
        fd = self._fds.get(number)
        if fd is not None:
            self._fds.move_to_end(number)
        return fd

    def drop(self, number: int) -> None:
        """Close segment `number` (its bytes no longer match what answers say is there)."""
        fd = self._fds.pop(number, None)
        if fd is not None:
            os.close(fd)
            self._forgotten.append(number)

    def forgotten(self) -> list[int]:
        """The segments closed since the last call, for the server to forget."""
        forgotten, self._forgotten = self._forgotten, []
        return forgotten

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._forgotten.clear()
