"""The segment files a root reader was handed (SCM_RIGHTS), kept open per connection.

Each costs a descriptor and keeps its file's disk space while the mount may have dropped it, so
at most MAX_HELD are kept: the one handed over longest ago is closed, and the server is told
(the next request's "forget") so that it hands that segment over again when an answer needs it.
"""

import os

MAX_HELD = 256


class SegmentFiles:
    def __init__(self) -> None:
        self.fds: dict[int, int] = {}  # by segment number, oldest handed over first
        self._forgotten: list[int] = []

    def __len__(self) -> int:
        return len(self.fds)

    def received(self, numbers: list[int], fds: list[int]) -> None:
        for number, fd in zip(numbers, fds):
            old = self.fds.pop(number, None)  # handed over again: the newer descriptor is right
            if old is not None:
                os.close(old)
            self.fds[number] = fd
        while len(self.fds) > MAX_HELD:
            self.drop(next(iter(self.fds)))

    def drop(self, number: int) -> None:
        """Close segment `number` (its bytes no longer match what answers say is there)."""
        fd = self.fds.pop(number, None)
        if fd is not None:
            os.close(fd)
            self._forgotten.append(number)

    def forgotten(self) -> list[int]:
        """The segments closed since the last call, for the server to forget."""
        forgotten, self._forgotten = self._forgotten, []
        return forgotten

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
        self._forgotten.clear()
