"""Walking a path for a caller as the kernel's default_permissions would, over a real metadata
engine: each answer is the errno the open through the mount gives, or a fallback where only the
kernel can judge (symbolic links, ACLs, special files)."""

from __future__ import annotations

import errno
import stat

import pytest

from aifs.bypass.caller import Caller
from aifs.bypass.resolve import ACL_XATTR, Fallback, Resolver
from aifs.errors import FsError
from aifs.meta import keys
from aifs.meta.txn import Txn
from tests.unit.conftest import engines, mkdir, mkfile  # noqa: F401 - engines is a fixture

ALICE, BOB, STAFF = 1000, 1001, 50
ROOT = Caller(1, 0, frozenset({0}))


def caller(uid: int, *groups: int) -> Caller:
    return Caller(1, uid, frozenset((uid, *groups)))


@pytest.fixture
def meta(engines):  # noqa: F811
    meta = engines.open()
    home = mkdir(meta, b"home", mode=0o755)
    alice = mkdir(meta, b"alice", home, mode=0o750, uid=ALICE, gid=STAFF)
    mkfile(meta, b"notes", alice, mode=0o640, uid=ALICE, gid=STAFF)
    mkfile(meta, b"mine", alice, mode=0o044, uid=ALICE, gid=STAFF)  # not for its owner
    mkdir(meta, b"sub", alice, mode=0o755, uid=ALICE, gid=STAFF)
    meta.create(alice, b"link", stat.S_IFLNK | 0o777, ALICE, STAFF, target=b"notes")
    meta.create(home, b"pipe", stat.S_IFIFO | 0o644, 0, 0)
    return meta


def outcome(meta, who: Caller, path: bytes) -> str | int:
    try:
        Resolver(meta, who, fresh=False).file(path)
    except FsError as e:
        return errno.errorcode[e.errno]
    except Fallback as e:
        return f"fallback: {e}"
    return "readable"


@pytest.mark.parametrize(("who", "path", "expected"), [
    (caller(ALICE), b"home/alice/notes", "readable"),
    (caller(BOB, STAFF), b"home/alice/notes", "readable"),  # a supplementary group
    (caller(BOB), b"home/alice/notes", "EACCES"),  # no search permission on alice
    (caller(BOB), b"home/alice/nothing", "EACCES"),  # the search is refused before the lookup
    (caller(ALICE), b"home/alice/nothing", "ENOENT"),
    (caller(ALICE), b"home/alice/mine", "EACCES"),  # the owner's bits, though others may read
    (caller(BOB, STAFF), b"home/alice/mine", "readable"),
    (ROOT, b"home/alice/mine", "readable"),
    (caller(ALICE), b"home/alice/notes/x", "ENOTDIR"),
    (caller(ALICE), b"home/alice/sub", "EISDIR"),
    (caller(BOB), b"home", "EISDIR"),
    (caller(ALICE), b"", "EISDIR"),
    (caller(ALICE), b"home/alice/link", "fallback: a symbolic link"),
    (caller(ALICE), b"home/alice/link/x", "fallback: a symbolic link in the path"),
    (caller(ALICE), b"home/pipe", "fallback: not a regular file"),
    (caller(ALICE), b"home//alice/notes", "fallback: the path has '.', '..' or empty components"),
])
def test_permissions_and_errors_are_the_kernels(meta, who, path, expected):
    assert outcome(meta, who, path) == expected


def _add_acl(meta, path: list[bytes]) -> None:
    ino = 1
    for name in path:
        ino = meta.lookup(ino, name)[0]
    txn = Txn(meta.kv)
    txn.batch.put(keys.xattr(ino, ACL_XATTR), b"\x02\0\0\0")
    txn.commit()


@pytest.mark.parametrize(("holder", "who"), [
    ([b"home", b"alice", b"notes"], caller(BOB, STAFF)),
    ([b"home", b"alice"], caller(BOB)),  # whom the mode bits would refuse: the ACL may let him in
])
def test_an_acl_on_the_file_or_a_directory_leaves_the_file_to_the_kernel(meta, holder, who):
    _add_acl(meta, holder)
    assert outcome(meta, who, b"home/alice/notes") == "fallback: a POSIX ACL"
    assert outcome(meta, ROOT, b"home/alice/notes") == "fallback: a POSIX ACL"
