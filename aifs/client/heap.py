"""A reader's malloc settings: the memory of files it has let go is reused for the next ones.

A reader holds a batch of files' bytes at once (64 files of 16 KiB are 1 MiB) and lets them
go together. With glibc's defaults the heap's top is then handed back to the kernel (past
128 KiB free), and the next batch faults every page in afresh, each fault dear on a virtual
machine that returns free pages to its host (docs/benchmarks.md). The thresholds below keep
that memory in the heap instead.

A process that chose its own malloc settings (glibc's environment variables or tunables)
keeps them: setting any of these also turns off glibc's own adjustment of the thresholds.
"""

import logging
import os

from aifs.malloc import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, set_malloc

log = logging.getLogger(__name__)

MMAP_THRESHOLD = 32 << 20  # glibc's largest, the most its own adjustment would reach: files come from the heap
TRIM_THRESHOLD = 64 << 20  # free heap a reader keeps for its next batch
CHOSEN = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")
TUNABLES = ("glibc.malloc.trim_threshold", "glibc.malloc.mmap_threshold", "glibc.malloc.top_pad")

_done = False  # a forked child inherits the settings with this


def keep_freed_file_memory() -> None:
    """Set the thresholds above once per process, unless the process chose its own."""
    global _done
    if _done or _chosen_by_process():
        return
    _done = True
    for option, value in set_malloc(((M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD))):
        log.info("mallopt(%d, %d) refused: the bytes of files read may be faulted in afresh", option, value)


def _chosen_by_process() -> bool:
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    return any(name in os.environ for name in CHOSEN) or any(name in tunables for name in TUNABLES)
