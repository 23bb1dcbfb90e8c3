"""Building the tiers a config describes; shared by the mount, fsck, gc and format.

The remote tiers (the flash servers' client, the peers of a shared volume) are built here and
handed to the TierManager behind the tier protocols, so aifs.tiers never imports the packages
that implement them."""

from aifs.config import Config
from aifs.config.models import ClusterConfig
from aifs.config.models import RemoteTier as RemoteTierConfig
from aifs.config.models import S3Tier as S3TierConfig
from aifs.flash.tier import RemoteFlashTier
from aifs.rdma.auth import Secret
from aifs.tiers.manager import TierManager
from aifs.tiers.nvme import NvmeTier
from aifs.tiers.objstore import LocalObjectStore
from aifs.tiers.packed import PackedStore, PackIndex
from aifs.tiers.protocol import ColdTier, PeerTier, RemoteTier
from aifs.tiers.ram import RamTier
from aifs.tiers.s3 import S3Tier
from aifs.tiers.s3_marker import MarkerMode, VolumeMarker


def _tier(config: Config, kind: str):
    return next((tier for tier in config.tiers if tier.kind == kind), None)


DEFAULT_DIRTY_SHARE = 0.9


def open_nvme(config: Config, read_only: bool = False) -> NvmeTier:
    """The NVMe tier; `read_only` (fsck without --repair) changes nothing on disk."""
    tier = _tier(config, "nvme")
    capacity = config.capacity_of(tier)
    max_dirty = config.writeback.max_dirty or int(capacity * DEFAULT_DIRTY_SHARE)
    return NvmeTier(config.tier_path(tier), capacity, max_dirty, read_only=read_only)


def open_cold(config: Config, volume: dict, marker: MarkerMode = MarkerMode.CLAIM,
              packs: PackIndex | None = None) -> ColdTier:
    """The durable bottom tier: the local object store, or an S3 bucket checked to belong to
    `volume`. With MarkerMode.CHECK (fsck, gc) opening it writes nothing. With the volume's
    `packs` index it reads packed blocks from their packs (aifs.tiers.packed)."""
    bottom = config.tiers[-1]
    if isinstance(bottom, S3TierConfig):
        cold = S3Tier(bottom, config.capacity_of(bottom), VolumeMarker.from_dict(volume), marker)
    else:
        cold = LocalObjectStore(config.tier_path(bottom), config.capacity_of(bottom),
                                read_only=marker is MarkerMode.CHECK)
    return cold if packs is None else PackedStore(cold, packs)


def open_remote(tier: RemoteTierConfig, volume: dict) -> RemoteTier:
    """The flash servers' client. Blocks are keyed by this volume's uuid, so volumes sharing
    servers never read each other's blocks; it connects lazily and never blocks a mount.
    Its connections authenticate with the secret in `secret_file` (checked with the config)."""
    erasure = (tier.erasure.k, tier.erasure.m) if tier.erasure is not None else None
    return RemoteFlashTier(
        tier.servers, replicas=tier.replicas, transport=tier.transport, rdma_device=tier.rdma_device,
        timeout=tier.timeout, read_bound=tier.read_bound, probe_interval=tier.probe_interval,
        failures_to_down=tier.failures_to_down, erasure=erasure, namespace=str(volume["uuid"]).encode(),
        secret=Secret.from_file(tier.secret_file),
    )


def open_peers(cluster: ClusterConfig) -> PeerTier:
    """The other mounts of a shared volume as one cache, each block on one of them. They serve
    plain block ids (they are this volume's mounts, holding its secret), over the transport
    their servers chose alike. Its members come from the sessions (`TierManager.set_peers`)."""
    assert cluster.secret_file is not None
    return RemoteFlashTier(
        (), replicas=1, transport=cluster.transport, rdma_device=cluster.rdma_device, timeout=cluster.timeout,
        read_bound=cluster.read_bound,
        probe_interval=cluster.probe_interval, failures_to_down=cluster.failures_to_down, name="peers",
        kind="peer", secret=Secret.from_file(cluster.secret_file),
    )


def open_tier_manager(config: Config, volume: dict, packs: PackIndex,
                      marker: MarkerMode = MarkerMode.CLAIM) -> TierManager:
    """Every tier of the config behind the one TierManager the mount's upper layers use."""
    ram = _tier(config, "ram")
    ram_tier = RamTier(config.capacity_of(ram) if ram is not None else 0)
    nvme = open_nvme(config)
    cold = open_cold(config, volume, marker, packs)
    remote = _tier(config, "remote")
    peers = open_peers(config.cluster) if config.cluster.serve is not None else None
    if remote is None:
        return TierManager(ram_tier, nvme, cold, dirty_wait=config.writeback.dirty_wait, peers=peers)
    return TierManager(
        ram_tier, nvme, cold, dirty_wait=config.writeback.dirty_wait, remote=open_remote(remote, volume),
        remote_capacity=remote.capacity, only_copy=remote.only_copy, peers=peers,
    )
