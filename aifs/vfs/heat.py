"""Heat: how much a file or block is used lately, decaying exponentially with time.

Each access (a file's open, or a read that reaches the mount) adds one; heat halves
every `half_life` seconds without use, so a dataset read every epoch stays warm
while last week's one cools off. Decay is applied lazily when an entry is touched
or read. The table lives in memory: it starts empty at every mount. It is bounded:
when it overflows, the coldest half is forgotten.
"""

import heapq
import math
import time
from collections.abc import Callable, Hashable

HALF_LIFE_S = 600.0
MAX_ENTRIES = 200_000


class Heat:
    def __init__(self, half_life: float = HALF_LIFE_S, max_entries: int = MAX_ENTRIES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.half_life = half_life
        self._rate = math.log(2) / half_life
        self.max_entries = max_entries
        self._clock = clock
        self._entries: dict[Hashable, tuple[float, float]] = {}

    def _decayed(self, value: float, since: float, now: float) -> float:
        return value * math.exp(-self._rate * (now - since))

    def touch(self, key: Hashable, amount: float = 1.0) -> None:
        now = self._clock()
        value, since = self._entries.get(key, (0.0, now))
        self._entries[key] = (self._decayed(value, since, now) + amount, now)
        if len(self._entries) > self.max_entries:
            self._forget_coldest()

    def value(self, key: Hashable) -> float:
        entry = self._entries.get(key)
        return 0.0 if entry is None else self._decayed(*entry, self._clock())

    def hottest(self, count: int) -> list[tuple[Hashable, float]]:
        now = self._clock()
        heats = ((key, self._decayed(v, t, now)) for key, (v, t) in self._entries.items())
        return heapq.nlargest(count, heats, key=lambda item: item[1])

    def forget(self, key: Hashable) -> None:
        self._entries.pop(key, None)

    def _forget_coldest(self) -> None:
        keep = self.hottest(self.max_entries // 2)
        kept = {key for key, _ in keep}
        self._entries = {k: e for k, e in self._entries.items() if k in kept}

    def __len__(self) -> int:
        return len(self._entries)


class HeatMap:
    """Heat of files (by inode) and of blocks (by block id), fed by opens and reads."""

    def __init__(self, half_life: float = HALF_LIFE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.files = Heat(half_life, clock=clock)
        self.blocks = Heat(half_life, clock=clock)

    def opened(self, ino: int) -> None:
        """Opens are counted because page-cache hits never reach us as reads."""
        self.files.touch(ino)

    def read(self, ino: int, block_ids: list[int]) -> None:
        self.files.touch(ino)
        for block_id in block_ids:
            self.blocks.touch(block_id)
