"""A stamp holds until one of its keys changes, or everything does: checked on a reader's view
of the table and on the mount's table alike."""

import os
from functools import partial

import pytest

from aifs.bypass.changes import ChangeTable, ChangeView, split
from aifs.meta import keys


@pytest.mark.parametrize("seen_by", ["reader", "mount"])
def test_a_stamp_holds_until_one_of_its_keys_changes(seen_by: str):
    table = ChangeTable()
    view = ChangeView(os.dup(table.fd))

    def watch(stamp):
        return partial((view if seen_by == "reader" else table).shows, *split(stamp))

    try:
        stamped = [keys.inode(5), keys.block(5, 0), keys.dentry(1, b"f")]
        stamp = table.stamp(table.sequence(), stamped)
        assert stamp is not None
        holds = watch(stamp)
        table.changed([keys.inode(6), keys.upload(5)])  # another file's attributes; an upload queue
        assert holds()
        table.changed([keys.block(5, 0)])
        assert not holds()
        again = watch(table.stamp(table.sequence(), stamped))
        assert again()
        table.changed(None)  # everything must go
        assert not again()
    finally:
        view.close()
        table.close()


def test_a_stamp_read_across_a_change_is_none():
    table = ChangeTable()
    try:
        since = table.sequence()
        table.changed([keys.inode(9)])
        assert table.stamp(since, [keys.inode(5)]) is None
    finally:
        table.close()


def test_a_stamp_names_one_counter_for_all_of_an_inodes_own_keys():
    table = ChangeTable()
    try:
        own = [keys.inode(5), keys.xattr(5, b"system.posix_acl_access")] + [keys.block(5, i) for i in range(1000)]
        entry = keys.dentry(1, b"f")
        slots, _ = split(table.stamp(table.sequence(), own + [entry]))
        assert len(slots) == 1 + len({table.slot(keys.inode(5)), table.slot(entry)})
        stamp = table.stamp(table.sequence(), own)
        table.changed([keys.xattr(5, b"user.note")])  # moves the inode's one counter
        assert not table.shows(*split(stamp))
    finally:
        table.close()
