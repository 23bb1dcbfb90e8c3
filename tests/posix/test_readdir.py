"""opendir/readdir: completeness, d_type/inode, stable offsets under modification."""

import collections
import os
import random

from helpers import write_file

PAD = "-" + "x" * 48  # longer names mean more getdents calls per listing


def _populate(d, n, prefix="e"):
    names = [f"{prefix}{i:05d}{PAD}" for i in range(n)]
    for name in names:
        os.close(os.open(d / name, os.O_CREAT | os.O_WRONLY, 0o644))
    return names


def test_listdir_complete(d):
    names = _populate(d, 2000)
    os.mkdir(d / "subdir")
    listed = os.listdir(d)
    assert len(listed) == len(set(listed)) == 2001
    assert set(listed) == set(names) | {"subdir"}
    assert "." not in listed and ".." not in listed


def test_listdir_empty_and_dots(d):
    assert os.listdir(d) == []
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert os.listdir(fd) == []
    finally:
        os.close(fd)


def test_scandir_types_and_inodes(d):
    write_file(d / "file", b"x")
    os.mkdir(d / "dir")
    os.symlink("file", d / "link")
    os.mkfifo(d / "fifo")
    entries = {e.name: e for e in os.scandir(d)}
    assert sorted(entries) == ["dir", "fifo", "file", "link"]
    assert entries["file"].is_file(follow_symlinks=False)
    assert entries["dir"].is_dir(follow_symlinks=False)
    assert entries["link"].is_symlink()
    assert not entries["fifo"].is_file(follow_symlinks=False)
    for name, e in entries.items():
        assert e.inode() == os.lstat(d / name).st_ino, name


def test_readdir_while_adding_and_removing(d):
    """Every entry present for the whole listing appears exactly once."""
    rnd = random.Random(1234)
    initial = _populate(d, 3000)
    removed: set[str] = set()
    added: set[str] = set()
    seen: list[str] = []
    alive = list(initial)
    it = os.scandir(d)
    try:
        for step, entry in enumerate(it):
            seen.append(entry.name)
            if step % 5 == 0:
                new = f"n{step:05d}{PAD}"
                os.close(os.open(d / new, os.O_CREAT | os.O_WRONLY, 0o644))
                added.add(new)
            if step % 7 == 0 and alive:
                victim = alive.pop(rnd.randrange(len(alive)))
                os.unlink(d / victim)
                removed.add(victim)
    finally:
        it.close()
    counts = collections.Counter(seen)
    dupes = sorted(n for n, c in counts.items() if c > 1)
    assert not dupes, f"listed more than once: {dupes[:10]} ({len(dupes)} in all)"
    stable = set(initial) - removed
    missing = sorted(stable - set(counts))
    assert not missing, f"{len(missing)} stable entries not listed, e.g. {missing[:10]}"
    unknown = set(counts) - set(initial) - added
    assert not unknown, f"listed names that never existed: {sorted(unknown)[:10]}"
    assert len(removed) > 300 and len(added) > 500


def test_unlink_everything_while_listing(d):
    """rm -r style: unlinking each entry as it is listed must not skip any."""
    _populate(d, 1500)
    with os.scandir(d) as it:
        for entry in it:
            os.unlink(entry.path)
    assert os.listdir(d) == []


def test_listing_twice_is_identical(d):
    _populate(d, 500)
    first = [e.name for e in os.scandir(d)]
    second = [e.name for e in os.scandir(d)]
    assert first == second


def test_listing_after_renames(d):
    names = _populate(d, 300)
    for name in names[::2]:
        os.rename(d / name, d / ("r" + name[1:]))
    listed = set(os.listdir(d))
    expected = {("r" + n[1:]) if i % 2 == 0 else n for i, n in enumerate(names)}
    assert listed == expected
