"""What every check works on: the metadata, the disk tiers, and the namespace index."""

from dataclasses import dataclass, field

from aifs.fsck.namespace import Namespace
from aifs.fsck.tiers import HeldBlocks
from aifs.meta import MetaEngine


@dataclass
class Context:
    """Shared by the checks of one run; `changes` counts repairs, which make the index stale."""

    meta: MetaEngine
    nvme: HeldBlocks
    cold: HeldBlocks
    verify: bool = False
    changes: int = 0
    stats: dict[str, int] = field(default_factory=dict)
    _index: Namespace | None = field(default=None, repr=False)
    _index_at: int = field(default=-1, repr=False)

    @property
    def tiers(self) -> tuple[HeldBlocks, HeldBlocks]:
        return (self.nvme, self.cold)

    def namespace(self) -> Namespace:
        """The index of the namespace as it is now: rebuilt when a repair changed the volume."""
        if self._index is None or self._index_at != self.changes:
            self._index = Namespace.build(self.meta.kv)
            self._index_at = self.changes
            self.stats["inodes"] = len(self._index.inodes)
            self.stats["dentries"] = self._index.dentries
        return self._index
