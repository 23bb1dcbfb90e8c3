"""Offline consistency check and repair of a volume: metadata keys, namespace, blocks, counters."""

from aifs.fsck.report import Finding, Summary
from aifs.fsck.runner import CHECKS, FsckError, check_volume, run_fsck

__all__ = ["CHECKS", "Finding", "FsckError", "Summary", "check_volume", "run_fsck"]
