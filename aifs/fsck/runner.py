"""Running fsck on a volume: take the volume lock, open its metadata, run the checks in order.

Without --repair nothing is written anywhere: the lock is taken read-only, the metadata and
the NVMe segments are opened read-only, and the durable tier is only read (its volume
marker is checked, never written). The order matters for --repair: every check sees the
volume as the checks before it left it: entries are fixed before orphans are adopted,
links are counted after that, and blocks and the usage counters last.
"""

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from aifs.config import Config
from aifs.errors import FsError
from aifs.fsck.blocks import check_blocks
from aifs.fsck.checks import check_keys, check_links
from aifs.fsck.context import Context
from aifs.fsck.marker import check_marker
from aifs.fsck.orphans import check_orphans
from aifs.fsck.packs import check_packs
from aifs.fsck.report import Finding, Summary
from aifs.fsck.tiers import open_tiers
from aifs.meta import MetaEngine, keys
from aifs.meta.engines import open_kv, redact
from aifs.meta.rocks_kv import ShardedRocksKV
from aifs.meta.sessions import live_sessions
from aifs.tiers.s3_marker import S3SetupError
from aifs.vfs.statedir import StateDirError, VolumeBusy, VolumeLock, known_node_id

CHECKS = (check_marker, check_keys, check_orphans, check_links, check_blocks, check_packs)

Emit = Callable[[Finding], None]


class FsckError(Exception):
    """The check could not run: no volume there, the volume is mounted, or the config does not fit it."""


def run_fsck(config: Config, *, repair: bool = False, verify: bool = False,
             emit: Emit = lambda finding: None) -> Summary:
    """Check (and with `repair`, fix) the volume of `config`; `emit` sees each finding as it is made.
    Raises FsckError when the check cannot run or cannot finish (a tier that cannot be read)."""
    try:
        with offline_volume(config, writable=repair) as meta, \
                open_tiers(config, meta, read_only=not repair) as (nvme, cold):
            ctx = Context(meta, nvme, cold, verify=verify)
            return check_volume(ctx, str(config.volume.state_dir), repair, emit)
    except (S3SetupError, StateDirError, FsError) as e:
        raise FsckError(str(e)) from None
    except OSError as e:  # S3 unreachable, a tier's disk unreadable
        raise FsckError(f"cannot read the volume's tiers: {e}") from None


@contextmanager
def offline_volume(config: Config, writable: bool = True) -> Iterator[MetaEngine]:
    """The metadata of an unmounted volume, locked against mounts for as long as it is open;
    opened read-only (and locked without writing the lock file) unless `writable`."""
    if config.meta.engine != "rocksdb":
        with _shared_metadata(config, writable) as meta:
            yield meta
        return
    state_dir = config.volume.state_dir
    meta_dir = state_dir / "meta"
    if not (meta_dir / "CURRENT").exists():
        raise FsckError(f"no aifs volume in {state_dir}: {meta_dir} holds no metadata")
    if writable and not os.access(state_dir, os.W_OK):
        raise FsckError(f"cannot repair the volume in {state_dir}: the state directory is not writable "
                        "(a read-only file system, or not its owner); check without --repair")
    with _volume_lock(state_dir, writable), _metadata(config, meta_dir, writable) as meta:
        yield meta


def check_volume(ctx: Context, state_dir: str, repair: bool, emit: Emit) -> Summary:
    summary = Summary(state_dir)
    for check in CHECKS:
        for finding in check(ctx):
            if repair and finding.action is not None:
                _repair(ctx, finding)
            summary.add(finding)
            emit(finding)
    summary.checked = dict(ctx.stats)
    return summary


def _repair(ctx: Context, finding: Finding) -> None:
    try:
        finding.action()
    except (FsError, OSError) as e:
        finding.note = f"repair failed: {e}"
        return
    finding.repaired = True
    ctx.changes += 1


@contextmanager
def _volume_lock(state_dir: Path, writable: bool) -> Iterator[None]:
    """The lock a mount holds: fsck never runs beside a mount, nor a mount beside fsck."""
    try:
        lock = VolumeLock.acquire(state_dir, "fsck", read_only=not writable)
    except VolumeBusy as e:
        raise FsckError(f"refusing to check a volume that is in use: {e}") from None
    try:
        yield
    finally:
        lock.close()


@contextmanager
def _shared_metadata(config: Config, writable: bool) -> Iterator[MetaEngine]:
    """A shared engine's volume, once no node has it mounted (no session beats within the
    session timeout); this node's state directory is locked as for a single-node volume."""
    kv = open_kv(config, read_only=not writable)
    try:
        if kv.get_fresh(keys.VOLUME) is None:
            raise FsckError(f"the metadata engine at {redact(config.meta.url)} holds no aifs volume")
        live = live_sessions(kv, config.meta.session_timeout)
        if live:
            raise FsckError(f"refusing to check a volume mounted on {len(live)} node(s): "
                            + "; ".join(info.describe() for info in live) + "; unmount it everywhere first")
        state_dir = config.volume.state_dir
        node = known_node_id(state_dir)
        with _volume_lock(state_dir, writable) if state_dir.is_dir() else nullcontext():
            yield MetaEngine(kv, config.volume.block_size, node=node.encode())
    finally:
        kv.close()


@contextmanager
def _metadata(config: Config, meta_dir: Path, writable: bool) -> Iterator[MetaEngine]:
    """Open the metadata without formatting it: an empty store is not a volume to check."""
    try:
        kv = ShardedRocksKV(meta_dir, config.meta.shards, read_only=not writable)
    except ValueError as e:
        raise FsckError(str(e)) from None
    if kv.get(keys.VOLUME) is None:
        kv.close()
        raise FsckError(f"{meta_dir} holds no volume record; it is not an aifs volume")
    meta = MetaEngine(kv, config.volume.block_size)
    try:
        yield meta
    finally:
        meta.close()
