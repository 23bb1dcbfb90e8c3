"""The mount's malloc settings: request buffers are reused from the heap, not faulted in again.

pyfuse3 copies every write request's payload (up to 1 MiB) into a new bytes
object, and every read reply is one too. With glibc's defaults such buffers are
mapped for each request, or handed back to the kernel when the heap's top is
trimmed, and the next request faults their pages in afresh: 70-360 thousand
page faults while a 2 GiB checkpoint is written, costly on a VM that returns
free pages to its host. Kept in the heap, the same checkpoint takes 16 thousand
and a tenth to a fifth less of the mount's CPU.

Blocks read from NVMe or S3 are kept in the heap too (up to glibc's largest
mapping threshold): mapped afresh, every 4 MiB block read cost a thousand page
faults, each a page zeroed by the kernel before the read overwrote it, a quarter
of the mount's CPU in a sequential read from NVMe. A block the RAM tier evicts
leaves its memory for the next block read, so the RAM tier's capacity still
bounds what the heap holds; two arenas at most, each trimmed past the trim
threshold, bound what free memory it keeps.

The heap lies in transparent huge pages (glibc's `glibc.malloc.hugetlb` tunable, read only
when a program starts, so `aifs mount` starts itself again with it): the RAM tier's heap
grows by a block at a time, and on 4 KiB pages a GiB read costs a quarter of a million
page faults, each far dearer on a VM that has handed free pages back to its host.
"""

import logging
import os
import sys

from aifs.malloc import M_ARENA_MAX, M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, set_malloc

log = logging.getLogger(__name__)

MMAP_THRESHOLD = 32 << 20  # glibc's largest: requests and blocks come from the heap
TRIM_THRESHOLD = 128 << 20  # free heap an arena keeps: twice what max_tasks' requests hold
ARENAS = 2  # the event loop's, and one the worker threads share (they allocate little)
TUNABLES = "GLIBC_TUNABLES"
HUGE_PAGES = "glibc.malloc.hugetlb"  # 1: madvise the heap for transparent huge pages (glibc 2.35 on)


def exec_with_huge_pages() -> None:
    """Run this program again at once, the same process, with its heap in huge pages; a
    program that already has the tunable (or any setting of it) goes on as it is."""
    tunables = os.environ.get(TUNABLES, "")
    if HUGE_PAGES in tunables or not sys.executable:
        return
    environment = dict(os.environ)
    environment[TUNABLES] = ":".join(filter(None, (tunables, f"{HUGE_PAGES}=1")))
    os.execve(sys.executable, sys.orig_argv, environment)


def keep_request_buffers() -> None:
    """Set the thresholds above; a C library without mallopt (musl) keeps its defaults."""
    settings = ((M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_ARENA_MAX, ARENAS))
    for option, value in set_malloc(settings):
        log.warning("mallopt(%d, %d) refused: request buffers may be faulted in afresh", option, value)
