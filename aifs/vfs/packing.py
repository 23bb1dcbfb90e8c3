"""Which queued blocks go up together as one pack (docs/packing.md).

Small blocks (small files, the tails of larger ones) are gathered in the order they were
queued, which is the order their files were closed, until a pack is full. While writers
are busy, a pack that does not fill waits for more, until its oldest block has waited
`pack_wait` or a sync hurries one of its blocks; once they are quiet it goes up as it is
(what they wrote is all queued by then). A lone small block goes up on its own. Large
blocks never wait for packs to fill. A path's rule may set its own size limit, or keep its
blocks out of packs (0); blocks queued before a restart follow the volume's limit.
"""

import math
from collections.abc import Callable, Iterable

from aifs.config.models import WritebackConfig

MAX_MEMBERS = 4096  # keeps a pack's record (one metadata value) small


class PackPlanner:
    def __init__(self, settings: WritebackConfig, staged_length: Callable[[int], int | None]) -> None:
        self.below = settings.pack_below
        self.size = settings.pack_size
        self.wait = settings.pack_wait
        self._staged_length = staged_length
        self._queued_at: dict[int, float] = {}
        self._below_of: dict[int, int] = {}  # blocks whose path's rule sets its own pack_below
        self._alone: set[int] = set()  # blocks a pack left out: their own upload says why

    def queued(self, block_ids: Iterable[int], now: float, below: int | None = None) -> None:
        """Blocks queued for upload now; `below`: their path's own pack_below (None: the volume's)."""
        for block_id in block_ids:
            self._queued_at.setdefault(block_id, now)
            if below is not None:
                self._below_of[block_id] = below

    def forget(self, block_ids: Iterable[int]) -> None:
        for block_id in block_ids:
            self._queued_at.pop(block_id, None)
            self._below_of.pop(block_id, None)
            self._alone.discard(block_id)

    def go_alone(self, block_ids: Iterable[int]) -> None:
        self._alone.update(block_ids)

    def next_upload(self, candidates: Iterable[int], urgent: set[int], now: float,
                    writers_busy: bool) -> tuple[list[int], float]:
        """The blocks of the next upload among `candidates` (queued, not started, in queue
        order): one block, or the members of a pack. When none is due yet: [] and the time
        at which a waiting pack becomes due (inf: nothing waits)."""
        group: list[int] = []
        group_bytes = 0
        large = None
        for block_id in candidates:
            length = self._staged_length(block_id)
            below = self._below_of.get(block_id, self.below)
            if not below or length is None or length >= below or block_id in self._alone:
                large = block_id if large is None else large
                if not group:
                    return [large], math.inf
                continue
            if group_bytes + length > self.size or len(group) >= MAX_MEMBERS:
                return group, math.inf
            group.append(block_id)
            group_bytes += length
        if not group:
            return [], math.inf
        due = self._queued_at.get(group[0], -math.inf) + self.wait
        if not writers_busy or now >= due or not urgent.isdisjoint(group):
            return group, math.inf
        return ([large], math.inf) if large is not None else ([], due)
