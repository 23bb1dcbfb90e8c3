"""Offline garbage collection of the durable tier: objects in the bucket (or the local object
store) that the volume's metadata no longer knows, found, sized and optionally deleted."""

from aifs.gc.report import GcReport, Stray
from aifs.gc.runner import GcError, run_gc

__all__ = ["GcError", "GcReport", "Stray", "run_gc"]
