"""Dropping the kernel's caches, so "cold" workloads really reach the filesystem."""

import os
from collections.abc import Callable

DROP_CACHES = "/proc/sys/vm/drop_caches"
NOT_DROPPED = "caches not dropped"


class CacheDropper:
    """Syncs, then empties the page, dentry and inode caches (needs root).

    Called with no arguments it returns None, or NOT_DROPPED when the kernel refused;
    it warns only once since the answer will not change during a run.
    """

    def __init__(self, warn: Callable[[str], None]) -> None:
        self._warn = warn
        self._permitted = True

    def __call__(self) -> str | None:
        os.sync()
        if self._permitted:
            try:
                with open(DROP_CACHES, "w") as control:
                    control.write("3")
                return None
            except OSError as error:
                self._permitted = False
                self._warn(f"warning: cannot drop caches ({error}); results marked '{NOT_DROPPED}'")
        return NOT_DROPPED
