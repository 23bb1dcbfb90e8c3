"""The disk tiers fsck checks, opened through their own classes: each knows its on-disk format
(NVMe segments, object-store files) and lists the blocks it holds."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from aifs.blockstore.compose import open_cold, open_nvme
from aifs.config import Config
from aifs.meta import MetaEngine
from aifs.tiers.nvme import NvmeTier
from aifs.tiers.protocol import ColdTier
from aifs.tiers.s3_marker import MarkerMode


class HeldBlocks(Protocol):
    """What fsck needs of a tier: list its blocks, read one, delete one."""

    name: str

    def block_ids(self) -> list[int]: ...

    def get(self, block_id: int) -> bytes | None: ...

    def delete(self, block_id: int) -> None: ...


@contextmanager
def open_tiers(config: Config, meta: MetaEngine, read_only: bool = False) -> Iterator[tuple[NvmeTier, ColdTier]]:
    """The NVMe staging tier and the durable bottom tier of a volume (a config always has both);
    the durable tier is only checked against the volume, never claimed (fsck writes no marker).
    A `read_only` NVMe tier changes nothing on disk (fsck without --repair)."""
    nvme = open_nvme(config, read_only=read_only)
    try:
        yield nvme, open_cold(config, meta.volume, MarkerMode.CHECK, meta)
    finally:
        nvme.close()
