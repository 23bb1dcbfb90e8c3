"""glibc's malloc settings (mallopt), which the mount and readers each set for what they allocate."""

import ctypes
from collections.abc import Sequence

from aifs.tiers.files import libc

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8


def set_malloc(settings: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Apply each (option, value); the ones the C library refused (all of them for a C library
    without mallopt, such as musl, which keeps its defaults)."""
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return list(settings)
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return [(option, value) for option, value in settings if mallopt(option, value) != 1]
