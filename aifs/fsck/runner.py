"""Running fsck on a volume: take the volume lock, open its metadata, run the checks in order.

The order matters for --repair: every check sees the volume as the checks before it
left it: entries are fixed before orphans are adopted, links are counted after that,
and blocks and the usage counters last.
"""

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from aifs.config import Config
from aifs.errors import FsError
from aifs.fsck.blocks import check_blocks
from aifs.fsck.checks import check_keys, check_links
from aifs.fsck.context import Context
from aifs.fsck.orphans import check_orphans
from aifs.fsck.report import Finding, Summary
from aifs.fsck.tiers import open_tiers
from aifs.meta import MetaEngine, keys
from aifs.meta.kv import ShardedRocksKV
from aifs.vfs.volume import VolumeBusy, lock_state_dir

CHECKS = (check_keys, check_orphans, check_links, check_blocks)
_VOLUME_KEY = keys.counter(b"volume")

Emit = Callable[[Finding], None]


class FsckError(Exception):
    """The check could not run: no volume there, the volume is mounted, or the config does not fit it."""


def run_fsck(config: Config, *, repair: bool = False, verify: bool = False,
             emit: Emit = lambda finding: None) -> Summary:
    """Check (and with `repair`, fix) the volume of `config`; `emit` sees each finding as it is made."""
    with offline_volume(config) as meta, open_tiers(config, meta.volume) as (nvme, cold):
        return check_volume(Context(meta, nvme, cold, verify=verify), str(config.volume.state_dir), repair, emit)


@contextmanager
def offline_volume(config: Config) -> Iterator[MetaEngine]:
    """The metadata of an unmounted volume, locked against mounts for as long as it is open."""
    state_dir = config.volume.state_dir
    meta_dir = state_dir / "meta"
    if not (meta_dir / "CURRENT").exists():
        raise FsckError(f"no aifs volume in {state_dir}: {meta_dir} holds no metadata")
    with _volume_lock(state_dir), _metadata(config, meta_dir) as meta:
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
def _volume_lock(state_dir: Path) -> Iterator[None]:
    """The lock a mount holds: fsck never runs beside a mount, nor a mount beside fsck."""
    try:
        fd = lock_state_dir(state_dir)
    except VolumeBusy as e:
        raise FsckError(f"refusing to check a volume that is in use: {e}") from None
    try:
        yield
    finally:
        os.close(fd)


@contextmanager
def _metadata(config: Config, meta_dir: Path) -> Iterator[MetaEngine]:
    """Open the metadata without formatting it: an empty store is not a volume to check."""
    try:
        kv = ShardedRocksKV(meta_dir, config.meta.shards)
    except ValueError as e:
        raise FsckError(str(e)) from None
    if kv.get(_VOLUME_KEY) is None:
        kv.close()
        raise FsckError(f"{meta_dir} holds no volume record; it is not an aifs volume")
    meta = MetaEngine(kv, config.volume.block_size)
    try:
        yield meta
    finally:
        meta.close()
