"""Running gc on a volume that is not mounted: take the volume lock as fsck and the mount do,
read the live set from the metadata, list the durable tier, and size (and with `delete`,
remove) what is left over.

Offline only: the metadata store belongs to one process at a time, and with the lock held no
upload, retirement or deletion can change the answer between the listing and a delete.
"""

from collections.abc import Callable

from aifs.blockstore.compose import open_cold
from aifs.config import Config
from aifs.fsck import FsckError
from aifs.fsck.runner import offline_volume
from aifs.gc.report import GcReport, Stray
from aifs.gc.sweep import stray_ids
from aifs.tiers.protocol import ColdTier
from aifs.tiers.s3_marker import MarkerMode, S3SetupError

Emit = Callable[[Stray], None]


class GcError(Exception):
    """gc could not run: no volume there, the volume is mounted, or its tier cannot be listed."""


def run_gc(config: Config, *, delete: bool = False, emit: Emit = lambda stray: None) -> GcReport:
    """Find (and with `delete`, remove) unreferenced objects in the volume's durable tier."""
    try:
        with offline_volume(config, writable=delete) as meta:
            cold = open_cold(config, meta.volume, MarkerMode.CHECK, meta)
            if cold.marker_missing:
                raise GcError(f"{cold.url()} holds no aifs volume marker, so its objects cannot be told "
                              "to be this volume's; refusing to list or delete them")
            stored = cold.block_sizes()
            report = GcReport(cold.url(), len(stored), delete)
            for block_id in stray_ids(list(stored), meta.kv):
                report.strays.append(_collect(cold, block_id, stored[block_id], delete))
                emit(report.strays[-1])
            return report
    except (FsckError, S3SetupError) as e:
        raise GcError(str(e)) from None
    except OSError as e:  # the listing failed: S3 down, bucket gone
        raise GcError(f"cannot list the durable tier: {e}") from None


def _collect(cold: ColdTier, block_id: int, size: int, delete: bool) -> Stray:
    """Record one stray and, if asked, delete it; a failure is recorded, not raised."""
    stray = Stray(block_id, cold.url(block_id), size)
    try:
        if delete:
            cold.delete(block_id)
            stray.deleted = True
    except OSError as e:
        stray.error = str(e)
    return stray
