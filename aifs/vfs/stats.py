"""What `aifs stats` samples of a running volume, every second or so: counters and health only.

The CLI turns the difference between two samples into rates, so everything here is a
running total or a figure of the moment, and cheap to read: no metadata lookups, no
network waits (the tiers' health comes from their circuit breakers, as in `aifs status`).
"""

import time
from typing import Any

from aifs.metrics.fuse import operation_totals
from aifs.vfs.status import tier_reports
from aifs.vfs.volume import Volume


def upload_figures(volume: Volume) -> dict[str, int]:
    """The upload backlog now, and the uploads since the mount."""
    uploader = volume.uploader
    pending = uploader.pending
    return {"pending_blocks": len(pending), "pending_bytes": volume.tiers.pending_bytes(pending),
            "dirty_bytes": volume.tiers.dirty_bytes(), "uploaded_blocks": uploader.uploaded_blocks,
            "uploaded_bytes": uploader.uploaded_bytes, "uploaded_packs": uploader.uploaded_packs,
            "packs_fetched_ahead": volume.tiers.packs_fetched_ahead, "offers_pending": volume.tiers.offers_pending}


def stats_sample(volume: Volume, started: float) -> dict[str, Any]:
    """FUSE operation totals, each tier's counters and health, uploads, sample-order prefetch;
    `mounted_s` is read on the mount's clock, so that rates divide by the time that passed where
    the counting happens."""
    return {"mounted_s": time.monotonic() - started, "fuse": operation_totals(),
            "tiers": tier_reports(volume), "uploads": upload_figures(volume),
            "sample_order": volume.sample_order.figures()}
