"""Open and opendir replies, with the kernel flags that spare requests.

A read-only handle has nothing to seal at close(), so its reply may carry FOPEN_NOFLUSH:
close() then sends no FLUSH request, and a file read whole costs an open and a release,
where it cost a flush too, each a round trip through the mount's one event loop. The
kernel releases a process's POSIX locks on a file with the FLUSH of any close of it, so a
file some process here holds POSIX locks on gets flushes on every handle opened meanwhile.

A directory's reply carries FOPEN_CACHE_DIR and FOPEN_KEEP_CACHE: the kernel keeps the
listing in the directory's page cache and serves the next listing from it while the
directory's mtime and change counter stay what they were. Changes made through this
mount bump the counter; another node's change reaches the kernel as a dropped inode
(aifs.fuse.invalidation), and the kernel asks for the mtime again before using the
cache (auto_inval_data), so a listing is never older than the attributes it goes with.

Released pyfuse3 cannot pass these flags (deploy/patches adds them); with it, replies
carry only what it knows and every close and listing asks the mount, as before.
"""

import pyfuse3

from aifs.fuse.attrs import Timeouts, entry_attributes
from aifs.fuse.listing import Entry

KERNEL_FLAGS = hasattr(pyfuse3.FileInfo(), "noflush")
NAME_ENTRIES = hasattr(pyfuse3, "readdir_name_reply")


def open_reply(fh: int, direct_io: bool, keep_cache: bool, noflush: bool) -> pyfuse3.FileInfo:
    if KERNEL_FLAGS:
        return pyfuse3.FileInfo(fh=fh, direct_io=direct_io, keep_cache=keep_cache, noflush=noflush)
    return pyfuse3.FileInfo(fh=fh, direct_io=direct_io, keep_cache=keep_cache)


def opendir_reply(fh: int) -> pyfuse3.FileInfo | int:
    if KERNEL_FLAGS:
        return pyfuse3.FileInfo(fh=fh, keep_cache=True, cache_readdir=True)
    return fh


def entry_reply(token: pyfuse3.ReaddirToken, entry: Entry, timeouts: Timeouts) -> bool:
    """Add one listing entry to the reply; False when the reply has no room left for it."""
    name, ino, node, kind, next_id = entry
    if node is None:
        return pyfuse3.readdir_name_reply(token, name, ino, kind, next_id)
    return pyfuse3.readdir_reply(token, name, entry_attributes(ino, node, timeouts), next_id)
