"""Checks of the key space: keys whose owner is gone, and link counts.

Each check is a generator of Findings over a streaming sweep. A repair may run while the
generator is paused; it touches only keys the sweep has already passed or does not read.
"""

from collections.abc import Iterator
from functools import partial
from itertools import groupby

from aifs.fsck import repair
from aifs.fsck.context import Context
from aifs.fsck.namespace import Namespace, split_dentry
from aifs.fsck.report import Finding, show_key
from aifs.meta import keys
from aifs.meta.attrs import Inode
from aifs.meta.engine import ROOT_INO

_OWNED = ((keys.BLOCK, "stray-block-refs", "block refs"),
          (keys.XATTR, "stray-xattrs", "extended attributes"),
          (keys.SYMLINK, "stray-symlink", "symlink target"),
          (keys.PIN, "stray-pin", "pin"))
PIN_TIERS = ("ram", "nvme")


def check_keys(ctx: Context) -> Iterator[Finding]:
    """Entries and per-inode keys that point at, or belong to, inodes that do not exist."""
    ns = ctx.namespace()
    yield from _check_dentries(ctx, ns)
    for tag, kind, what in _OWNED:
        yield from _check_owned(ctx, ns, tag, kind, what)
    yield from _check_pins(ctx, ns)


def _check_dentries(ctx: Context, ns: Namespace) -> Iterator[Finding]:
    for key, value in ctx.meta.kv.scan(keys.DENTRY):
        parent, name, child = split_dentry(key, value)
        if ns.valid(parent, child):
            yield from _check_entry_type(ctx, ns, key, value, (parent, name, child))
            continue
        subject = f"{ns.entry_path(parent, name)} ({show_key(key)}) -> inode {child}"
        delete = partial(repair.delete_keys, ctx.meta.kv, key)
        if parent not in ns.dirs:
            why = "does not exist" if parent not in ns.inodes else "is not a directory"
            yield Finding("stray-dentry", subject, f"the entry's directory, inode {parent}, {why}",
                          "delete the entry", delete, ino=parent)
        else:
            yield Finding("dangling-dentry", subject, f"the entry names inode {child}, which does not exist",
                          "delete the entry", delete, ino=child)


def _check_entry_type(ctx: Context, ns: Namespace, key: bytes, value: bytes,
                      entry: tuple[int, bytes, int]) -> Iterator[Finding]:
    """An entry records its inode's file type for listings; an entry of the older form records none."""
    parent, name, child = entry
    recorded, actual = keys.read_entry(value)[1], ns.inodes[child]
    if recorded is not None and recorded != actual:
        yield Finding("dentry-type", f"{ns.entry_path(parent, name)} ({show_key(key)}) -> inode {child}",
                      f"the entry records file type {recorded:o}, but inode {child} is of type {actual:o}",
                      "record the inode's type in the entry",
                      partial(repair.put_key, ctx.meta.kv, key, keys.entry(child, actual)), ino=child)


def _check_owned(ctx: Context, ns: Namespace, tag: bytes, kind: str, what: str) -> Iterator[Finding]:
    """Keys of one tag grouped by owner (they sit together in the owner's shard)."""
    kv = ctx.meta.kv
    for ino, group in groupby(kv.scan(tag), key=lambda item: keys.read_u64(item[0], 1)):
        if ino in ns.inodes:
            continue
        count = sum(1 for _ in group)
        prefix = tag + keys.u64(ino)
        yield Finding(kind, f"{count} {tag.decode()} key(s) of inode {ino}",
                      f"{what} of inode {ino}, which does not exist",
                      "delete them", partial(repair.delete_prefix, kv, prefix), ino=ino)


def _check_pins(ctx: Context, ns: Namespace) -> Iterator[Finding]:
    """A pin names an existing regular file and a tier that can hold it (ram or nvme);
    inodes that do not exist are the stray-pin check's."""
    for key, value in ctx.meta.kv.scan(keys.PIN):
        ino = keys.read_u64(key, 1)
        if ino not in ns.inodes:
            continue
        tier = value.decode(errors="replace")
        why = (f"inode {ino} is a directory; only files are pinned" if ino in ns.dirs
               else f"the tier {tier!r} is not one of {', '.join(PIN_TIERS)}" if tier not in PIN_TIERS else None)
        if why:
            yield Finding("bad-pin", show_key(key), why, "drop the pin",
                          partial(repair.delete_keys, ctx.meta.kv, key), ino=ino)


def check_links(ctx: Context) -> Iterator[Finding]:
    """Link counts and directory parents against the entries that really name each inode.

    Inodes that no entry names are the orphan check's business and are skipped here.
    """
    ns = ctx.namespace()
    yield from _check_dir_hardlinks(ctx, ns)
    for key, value in ctx.meta.kv.scan(keys.INODE):
        ino, node = keys.read_u64(key, 1), Inode.decode(value)
        yield from _check_nlink(ctx, ns, ino, node)
        if node.is_dir:
            yield from _check_parent(ctx, ns, ino, node)


def _check_dir_hardlinks(ctx: Context, ns: Namespace) -> Iterator[Finding]:
    for parent, name, child in ns.extra:
        key = keys.dentry(parent, name)
        yield Finding(
            "directory-hardlink", f"{ns.entry_path(parent, name)} ({show_key(key)}) -> inode {child}",
            f"a second entry for directory {ns.path(child)}; a directory has exactly one name",
            "delete this entry", partial(repair.delete_keys, ctx.meta.kv, key), ino=child,
        )


def _expected_nlink(ns: Namespace, ino: int, node: Inode) -> int | None:
    if not node.is_dir:
        return ns.names[ino] or None
    if ino == ROOT_INO or ino in ns.entry:
        return 2 + ns.subdirs[ino]
    return None


def _check_nlink(ctx: Context, ns: Namespace, ino: int, node: Inode) -> Iterator[Finding]:
    expected = _expected_nlink(ns, ino, node)
    if expected is None or expected == node.nlink:
        return
    counted = "2 + its subdirectories" if node.is_dir else "the entries naming it"
    yield Finding(
        "wrong-nlink", _describe(ns, ino, node),
        f"nlink is {node.nlink}, but {counted} make {expected}",
        f"set nlink to {expected}", partial(repair.set_inode, ctx.meta, ino, nlink=expected), ino=ino,
    )


def _check_parent(ctx: Context, ns: Namespace, ino: int, node: Inode) -> Iterator[Finding]:
    expected = ROOT_INO if ino == ROOT_INO else ns.entry.get(ino, (None,))[0]
    if expected is None or expected == node.parent:
        return
    yield Finding(
        "wrong-parent", _describe(ns, ino, node),
        f"its parent field says inode {node.parent}, but its entry is in directory {expected}",
        f"set parent to {expected}", partial(repair.set_inode, ctx.meta, ino, parent=expected), ino=ino,
    )


def _describe(ns: Namespace, ino: int, node: Inode) -> str:
    """A directory by its path; a file by its inode number (finding its name costs a full sweep)."""
    return f"directory inode {ino} ({ns.path(ino)})" if node.is_dir else f"inode {ino}"
