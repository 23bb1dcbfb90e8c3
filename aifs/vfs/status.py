"""What `aifs status` reports of a running volume: each tier's figures and health, the
metadata's health, uploads, pins, readahead and the hottest files.

Nothing here waits on the network: health comes from the circuit breakers the tiers
keep anyway, and the remote tier's figures from its background refreshes.
"""

import time
from dataclasses import asdict
from typing import Any

from aifs.errors import FsError
from aifs.meta.sessions import list_sessions
from aifs.tiers.manager import TierManager
from aifs.vfs.volume import Volume

HOTTEST = 10


def _down_for(health: dict[str, Any]) -> dict[str, Any]:
    """A circuit breaker's health (CircuitBreaker.health) with how long its service has been
    down (None while up) in place of since when, a clock reading no other process can use."""
    report = {key: value for key, value in health.items() if key != "down_since"}
    down_since = health["down_since"]
    report["down_for_s"] = None if down_since is None else round(time.monotonic() - down_since, 1)
    return report


def durable_health(tiers: TierManager) -> dict[str, Any]:
    """Whether the durable tier answers: an S3 tier by its circuit breaker (up only while it is
    closed); a local object store is always up."""
    health = tiers.durable_breaker_health()
    return {"up": True} if health is None else _down_for(health)


def remote_health(server_health: list[dict[str, Any]]) -> dict[str, Any]:
    """The flash servers (or peers) as their circuit breakers see them; the tier is up while one
    is, or while it has none (a node with no peers yet)."""
    servers = [_down_for(server) for server in server_health]
    return {"up": any(s["up"] for s in servers) or not servers, "servers": servers}


def metadata_health(volume: Volume) -> dict[str, Any]:
    """A metadata store that failed a write turns the volume read-only; its reason, if it did.
    A shared engine also lists the sessions: every node that has the volume mounted."""
    failure = volume.meta.kv.write_failure
    health: dict[str, Any] = {"engine": volume.config.meta.engine, "writable": failure is None,
                              "write_failure": failure}
    if volume.cluster is not None:
        health["session"] = volume.cluster.session.sid
        health["sessions"] = [asdict(info) for info in list_sessions(volume.meta.kv)]
    return health


def durable_used(volume: Volume) -> tuple[int, str]:
    """Bytes in the durable tier and where the figure comes from. A local store counts its
    objects; a bucket cannot be asked cheaply, so the figure is the volume's data by its
    metadata (which survives remounts) less the bytes still waiting for upload."""
    counted = volume.tiers.durable_used()
    if counted is not None:
        return counted, "store"
    _, held = volume.meta.volume_stats()
    return max(held - volume.tiers.pending_bytes(volume.uploader.pending), 0), "metadata"


def tier_reports(volume: Volume) -> dict[str, dict[str, Any]]:
    """Every configured tier, top to bottom (a RAM tier of no capacity is none)."""
    tiers = volume.tiers
    reports = {}
    for tier in tiers.configured_tiers:
        stats = tiers.stats[tier.name]
        report = {"used": tier.used(), "capacity": tier.capacity, "hits": stats.hits,
                  "bytes_read": stats.bytes_read, "up": True}
        if tier.name == tiers.durable_name:
            report["used"], report["used_from"] = durable_used(volume)
            report.update(durable_health(tiers))
        else:
            servers = tiers.server_health(tier.name)
            if servers is not None:
                report.update(remote_health(servers))
        reports[tier.name] = report
    return reports


def hottest_files(volume: Volume, count: int = HOTTEST) -> list[dict[str, Any]]:
    """The most used files lately, with a path when the mount has seen one since it started
    (the name cache learns paths from lookups; a file's inode has no parent pointer)."""
    heat = volume.data.heat.files
    hottest = []
    for ino, value in heat.hottest(2 * count):
        if len(hottest) == count:
            break
        try:
            volume.meta.getattr(ino)
        except FsError:  # deleted since: forget it
            heat.forget(ino)
            continue
        hottest.append({"inode": ino, "path": volume.names.path_of(ino), "heat": round(value, 3)})
    return hottest


def status_report(volume: Volume, started: float) -> dict[str, Any]:
    """The whole report; counters of uploads and readahead are totals since `started` (the mount)."""
    tiers = volume.tiers
    uploader = volume.uploader
    pending = uploader.pending
    mounted_s = max(time.monotonic() - started, 1e-9)
    return {
        "state_dir": str(volume.state_dir),
        "mounted_s": round(mounted_s, 1),
        "metadata": metadata_health(volume),
        "tiers": tier_reports(volume),
        "dirty_bytes": tiers.dirty_bytes(),
        "pending_blocks": len(pending),
        "pending_bytes": tiers.pending_bytes(pending),
        "uploaded_blocks": uploader.uploaded_blocks,
        "uploaded_bytes": uploader.uploaded_bytes,
        "uploaded_packs": uploader.uploaded_packs,
        "upload_rate": uploader.uploaded_bytes / mounted_s,
        "served_to_peers": dict(volume.peer_server.served) if volume.peer_server is not None else {},
        "offers_pending": tiers.offers_pending,
        "adopted_blocks": volume.adopter.adopted_blocks if volume.adopter is not None else 0,
        "stranded_blocks": len(volume.adopter.stranded) if volume.adopter is not None else 0,
        "open_files": len(volume.files.all()),
        "pinned": volume.pinner.status(),
        "readahead": volume.prefetch.status(),
        "hottest_files": hottest_files(volume),
        "heat_half_life_s": volume.data.heat.files.half_life,
    }
