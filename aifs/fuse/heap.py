"""The mount's malloc settings: request buffers are reused from the heap, not faulted in again.

pyfuse3 copies every write request's payload (up to 1 MiB) into a new bytes
object, and every read reply is one too. With glibc's defaults such buffers are
mapped for each request, or handed back to the kernel when the heap's top is
trimmed, and the next request faults their pages in afresh: 70-360 thousand
page faults while a 2 GiB checkpoint is written, costly on a VM that returns
free pages to its host. Kept in the heap, the same checkpoint takes 16 thousand
and a tenth to a fifth less of the mount's CPU. Blocks (4 MiB and more) stay
above the mapping threshold, so a block the RAM tier evicts still returns its
memory at once; two arenas at most bound what the heap keeps to twice the trim
threshold.
"""

import ctypes
import logging

from aifs.tiers.files import libc

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
MMAP_THRESHOLD = 2 << 20  # above a FUSE request (1 MiB + header), below a block
TRIM_THRESHOLD = 128 << 20  # free heap an arena keeps: twice what max_tasks' requests hold
ARENAS = 2  # the event loop's, and one the worker threads share (they allocate little)


def keep_request_buffers() -> None:
    """Set the thresholds above; a C library without mallopt (musl) keeps its defaults."""
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        log.info("this C library has no mallopt: request buffers use its default allocator settings")
        return
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    settings = ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD), (_M_ARENA_MAX, ARENAS))
    for option, value in settings:
        if mallopt(option, value) != 1:
            log.warning("mallopt(%d, %d) refused: request buffers may be faulted in afresh", option, value)
