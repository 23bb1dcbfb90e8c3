"""Shared memory the mount writes and its readers only read: a memfd sealed so that no mapping
made after the mount's own may write it, and no one may resize it."""

import fcntl
import mmap
import os

F_SEAL_FUTURE_WRITE = 0x10  # linux/fcntl.h; Python's fcntl names the other seals only
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | F_SEAL_FUTURE_WRITE | fcntl.F_SEAL_SEAL


def sealed_memfd(name: str, size: int, allocate: bool) -> tuple[int, mmap.mmap]:
    """A memfd of `size` bytes and the mount's writable mapping of it; with `allocate`, every
    page is there from the start (readers may look anywhere in it at once)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        if allocate:
            os.posix_fallocate(fd, 0, size)
        shared = mmap.mmap(fd, size)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd, shared


def read_only_view(fd: int) -> mmap.mmap:
    """A reader's mapping of a sealed memfd; takes over `fd`."""
    try:
        return mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
