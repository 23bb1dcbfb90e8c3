"""Uploads for nodes that are gone: the node that runs the volume's duties uploads the blocks
other nodes staged and left behind, from their pinned copies on the flash servers, and
abandons the packs they were putting.

A block closed under durability "cluster" is pinned on the flash servers before close()
returns, so the writer's death strands nothing: its queue records (`U` keys naming its node)
stay in the metadata, and once no live session is of that node, the duties node reads each
block from the flash servers, checks it against the recorded checksum, uploads it, and clears
the record. Uploading a block twice is harmless (the same bytes under the same name), so a
node that was only paused, and uploads too, loses nothing either.

A block staged only on the dead node's NVMe (durability "local") cannot be adopted: it stays
queued for that node's next mount, is counted in `aifs status` and logged once, never dropped.
"""

import logging

import trio

from aifs.meta import MetaEngine
from aifs.meta.writestate import MetaWriteFailed
from aifs.tiers.manager import TierManager
from aifs.vfs.cluster import ClusterNode

log = logging.getLogger(__name__)


class Adopter:
    def __init__(self, meta: MetaEngine, tiers: TierManager, cluster: ClusterNode, every_s: float,
                 concurrency: int) -> None:
        self._meta = meta
        self._tiers = tiers
        self._cluster = cluster
        self._every_s = every_s
        self._limit = trio.CapacityLimiter(concurrency)
        self.stranded: set[int] = set()  # staged on a dead node, and on no flash server
        self.adopted_blocks = 0

    async def run(self) -> None:
        while True:
            await trio.sleep(self._every_s)
            if self._cluster.session.members and self._cluster.runs_duties():
                try:
                    await self.adopt_orphans()
                except (MetaWriteFailed, OSError) as e:
                    log.warning("uploading the blocks of dead nodes failed: %s; retrying in %.0f s", e, self._every_s)

    async def adopt_orphans(self) -> None:
        """One pass over the queues of nodes that have no live session."""
        live = {info.node for info in self._cluster.session.members}
        self._abandon_packs(live)
        orphans = {block_id: (expected, node) for block_id, (expected, node) in self._meta.pending_elsewhere().items()
                   if node not in live}
        done: list[int] = []
        if self._tiers.can_adopt:
            async with trio.open_nursery() as nursery:
                for block_id, (expected, _) in orphans.items():
                    nursery.start_soon(self._adopt_one, block_id, expected, done)
        if done:
            await self._tiers.adopted_durable(done)
            self._meta.uploads_done(done)
            self.adopted_blocks += len(done)
            log.info("uploaded %d block(s) staged by nodes that are gone", len(done))
        self._report_stranded({b: node for b, (_, node) in orphans.items() if b not in done})

    def _abandon_packs(self, live: set[str]) -> None:
        """The packs that nodes now gone were putting are abandoned: their objects, if put at
        all, go as garbage, while their blocks stay queued (and are adopted like any other)."""
        gone = {pack_id: node for pack_id, node in self._meta.unfinished_elsewhere().items() if node not in live}
        abandoned = self._meta.abandon_elsewhere(gone) if gone else []
        if abandoned:
            log.info("abandoned %d pack(s) that node(s) %s, which are gone, were putting", len(abandoned),
                     ", ".join(sorted({gone[p] for p in abandoned})))

    async def _adopt_one(self, block_id: int, expected: int, done: list[int]) -> None:
        async with self._limit:
            if await self._tiers.adopt(block_id, expected):
                done.append(block_id)

    def _report_stranded(self, stranded: dict[int, str]) -> None:
        new = stranded.keys() - self.stranded
        self.stranded = set(stranded)
        if new:
            nodes = sorted({stranded[b] for b in new})
            log.warning("%d block(s) are staged only on node(s) %s, which are gone, and on no flash server "
                        "(durability 'local'): they wait for those nodes to mount the volume again",
                        len(new), ", ".join(nodes))
