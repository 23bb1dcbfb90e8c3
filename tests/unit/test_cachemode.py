"""Which handles bypass the page cache, and when a cached open must drop stale pages."""

from aifs.fuse.cachemode import CacheMode, CacheModes

DIRECT = CacheMode(direct_io=True, keep_cache=False)
CACHED = CacheMode(direct_io=False, keep_cache=True)
CACHED_DROPPING_PAGES = CacheMode(direct_io=False, keep_cache=False)


def _after_a_direct_handle(inode: int = 7) -> CacheModes:
    """A write-only handle of `inode` opened (direct) and released again."""
    modes = CacheModes()
    assert modes.open(1, inode, wants_direct=True) == DIRECT
    modes.release(1)
    return modes


def test_a_write_only_open_is_direct_unless_cached_handles_are_open():
    modes = _after_a_direct_handle()
    assert modes.open(2, inode=8, wants_direct=False) == CACHED
    assert modes.open(3, inode=8, wants_direct=True) == CACHED


def test_every_open_beside_a_direct_handle_is_direct():
    modes = CacheModes()
    modes.open(1, inode=7, wants_direct=True)
    assert modes.open(2, inode=7, wants_direct=False) == DIRECT
    modes.release(1)
    assert modes.open(3, inode=7, wants_direct=False) == DIRECT  # handle 2 is still direct
    modes.release(2)
    modes.release(3)
    assert modes.open(4, inode=7, wants_direct=False) == CACHED_DROPPING_PAGES


def test_only_the_first_cached_open_after_direct_writes_drops_pages():
    modes = _after_a_direct_handle()
    assert modes.open(2, inode=7, wants_direct=False) == CACHED_DROPPING_PAGES
    assert modes.open(3, inode=7, wants_direct=False) == CACHED


def test_a_forgotten_inode_has_no_pages_left_to_drop():
    modes = _after_a_direct_handle()
    modes.forget([7])
    assert modes.open(2, inode=7, wants_direct=False) == CACHED
