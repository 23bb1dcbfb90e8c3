"""A reader's watch of a stamp holds until one of the stamp's keys changes, or everything does."""

import os

from aifs.bypass.changes import ChangeTable, ChangeView
from aifs.meta import keys


def test_a_watch_holds_until_a_key_of_its_stamp_changes():
    table = ChangeTable()
    view = ChangeView(os.dup(table.fd))
    try:
        stamped = [keys.inode(5), keys.block(5, 0), keys.dentry(1, b"f")]
        stamp = table.stamp(table.sequence(), stamped)
        assert stamp is not None
        watch = view.watch(stamp)
        table.changed([keys.inode(6), keys.upload(5)])  # another file's attributes; an upload queue
        assert watch()
        table.changed([keys.block(5, 0)])
        assert not watch()
        again = view.watch(table.stamp(table.sequence(), stamped))
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
