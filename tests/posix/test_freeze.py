"""A frozen tree: reads work, every kind of change fails with EROFS, a thaw undoes it."""

import errno
import os

from conftest import aifs_cli
from helpers import expect_errno


def _run(*args: str) -> str:
    cp = aifs_cli(*args)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout


def test_a_frozen_tree_refuses_changes_until_thawed(d) -> None:
    (d / "tree" / "sub").mkdir(parents=True)
    (d / "tree" / "empty").mkdir()
    (d / "tree" / "sub" / "f").write_bytes(b"data")
    (d / "tree" / "g").write_bytes(b"more")
    assert "5 inodes frozen" in _run("freeze", str(d / "tree"))
    assert (d / "tree" / "sub" / "f").read_bytes() == b"data"
    for change, args in [
        (os.open, (d / "tree" / "g", os.O_WRONLY)),
        (os.open, (d / "tree" / "new", os.O_CREAT | os.O_WRONLY, 0o644)),
        (os.mkdir, (d / "tree" / "sub" / "dir",)),
        (os.unlink, (d / "tree" / "g",)),
        (os.rename, (d / "tree" / "g", d / "tree" / "h")),
        (os.rename, (d / "tree", d / "moved")),
        (os.chmod, (d / "tree" / "sub" / "f", 0o600)),
        (os.truncate, (d / "tree" / "g", 0)),
        (os.setxattr, (d / "tree" / "g", "user.k", b"v")),
        (os.link, (d / "tree" / "g", d / "tree" / "sub" / "g2")),
        (os.rmdir, (d / "tree" / "empty",)),
    ]:
        expect_errno(errno.EROFS, change, *args)
    assert sorted(os.listdir(d / "tree")) == ["empty", "g", "sub"]
    assert "5 inodes thawed" in _run("thaw", str(d / "tree"))
    (d / "tree" / "g").write_bytes(b"changed")
    os.rename(d / "tree" / "sub", d / "tree" / "sub2")
    assert (d / "tree" / "g").read_bytes() == b"changed"
    assert (d / "tree" / "sub2" / "f").read_bytes() == b"data"
