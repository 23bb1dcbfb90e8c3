"""The disk tiers fsck checks, opened through their own classes: each knows its on-disk format
(NVMe segments, object-store files) and lists the blocks it holds."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from aifs.config import Config
from aifs.tiers.nvme import NvmeTier
from aifs.tiers.objstore import LocalObjectStore


class HeldBlocks(Protocol):
    """What fsck needs of a tier: list its blocks, read one, delete one."""

    name: str

    def block_ids(self) -> list[int]: ...

    def get(self, block_id: int) -> bytes | None: ...

    def delete(self, block_id: int) -> None: ...


@contextmanager
def open_tiers(config: Config) -> Iterator[tuple[NvmeTier, LocalObjectStore]]:
    """The NVMe staging tier and the object store of a volume (a config always has both)."""
    by_kind = {tier.kind: tier for tier in config.tiers}
    nvme_config, cold_config = by_kind["nvme"], by_kind["objstore"]
    nvme = NvmeTier(config.tier_path(nvme_config), config.capacity_of(nvme_config))
    try:
        yield nvme, LocalObjectStore(config.tier_path(cold_config), config.capacity_of(cold_config))
    finally:
        nvme.close()
