"""Building the tiers a config describes; shared by the mount and by fsck."""

from aifs.config import Config
from aifs.config.models import S3Tier as S3TierConfig
from aifs.tiers.manager import TierManager
from aifs.tiers.nvme import NvmeTier
from aifs.tiers.objstore import LocalObjectStore
from aifs.tiers.protocol import ColdTier
from aifs.tiers.ram import RamTier
from aifs.tiers.s3 import S3Tier
from aifs.tiers.s3_marker import VolumeMarker


def _tier(config: Config, kind: str):
    return next((tier for tier in config.tiers if tier.kind == kind), None)


DEFAULT_DIRTY_SHARE = 0.9


def open_nvme(config: Config) -> NvmeTier:
    tier = _tier(config, "nvme")
    capacity = config.capacity_of(tier)
    max_dirty = config.writeback.max_dirty or int(capacity * DEFAULT_DIRTY_SHARE)
    return NvmeTier(config.tier_path(tier), capacity, max_dirty)


def open_cold(config: Config, volume: dict) -> ColdTier:
    """The durable bottom tier: the local object store, or an S3 bucket checked to belong to `volume`."""
    bottom = config.tiers[-1]
    if isinstance(bottom, S3TierConfig):
        return S3Tier(bottom, config.capacity_of(bottom), VolumeMarker.from_dict(volume))
    return LocalObjectStore(config.tier_path(bottom), config.capacity_of(bottom))


def open_tier_manager(config: Config, volume: dict) -> TierManager:
    ram = _tier(config, "ram")
    ram_tier = RamTier(config.capacity_of(ram) if ram is not None else 0)
    return TierManager(
        ram_tier, open_nvme(config), open_cold(config, volume), dirty_wait=config.writeback.dirty_wait,
    )
