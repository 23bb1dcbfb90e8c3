"""Changes other nodes make, pushed from the shared engine into this node's kernel caches.

The engine publishes the keys every commit changed; a changed directory entry drops the
kernel's cached name (a rename or unlink elsewhere is seen at the next lookup), a changed
inode drops its cached attributes (the next stat asks the mount; with auto_inval_data, a
changed size or mtime then drops its cached pages). This runs on the engine's listener
thread, never inside a request handler, so the kernel may take the locks it needs.
"""

import errno
import logging

import pyfuse3

from aifs.meta import keys

log = logging.getLogger(__name__)


def invalidate_kernel(changed: list[bytes] | None) -> None:
    """Listener for the engine's pushes; None (pushes were lost for a while) leaves the kernel's
    caches to their timeouts."""
    if changed is None:
        log.warning("change notices from the metadata engine were interrupted; the kernel's caches "
                    "fall back on their timeouts for changes made meanwhile")
        return
    for key in changed:
        tag = key[:1]
        try:
            if tag == keys.DENTRY:
                pyfuse3.invalidate_entry_async(keys.read_u64(key, 1), key[9:], ignore_enoent=True)
            elif tag == keys.INODE:
                pyfuse3.invalidate_inode(keys.read_u64(key, 1), attr_only=True)
        except OSError as e:
            if e.errno != errno.ENOENT:  # the kernel never knew the inode: nothing to drop
                log.warning("dropping the kernel's cache of %r failed: %s", key, e)
