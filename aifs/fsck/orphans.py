"""Inodes that the walk from the root does not reach, and the orphan list (O keys).

An inode no entry names goes to /lost+found; so does one directory of each loop of
directories cut off from the root. What hangs below them is reached through them.
"""

from collections.abc import Generator, Iterator
from functools import partial

from aifs.fsck import repair
from aifs.fsck.context import Context
from aifs.fsck.namespace import Namespace
from aifs.fsck.report import Finding, show_key
from aifs.meta import keys
from aifs.meta.engine import ROOT_INO


def check_orphans(ctx: Context) -> Iterator[Finding]:
    ns = ctx.namespace()
    if ROOT_INO not in ns.dirs:
        yield Finding("missing-root", "inode 1", "the root directory is missing or not a directory; "
                      "the namespace cannot be walked", ino=ROOT_INO)
        return
    reached: set[int] = set()
    ns.walk(ctx.meta, ROOT_INO, reached)
    freed = yield from _check_orphan_list(ctx, ns)
    lost_found = repair.LostFound(ctx.meta)
    yield from _adopt_unnamed(ctx, ns, lost_found, reached, freed)
    yield from _cut_loops(ctx, ns, lost_found, reached)


def _check_orphan_list(ctx: Context, ns: Namespace) -> Generator[Finding, None, set[int]]:
    """O keys: files unlinked while open. Returns those left with no link, which are freed.

    Anything else on the list that no entry names is left to the lost+found step.
    """
    freed: set[int] = set()
    for ino in ctx.meta.orphans():
        key = keys.orphan(ino)
        stale = "does not exist" if ino not in ns.inodes else "still has a name" if ns.names[ino] else None
        if stale:
            yield Finding("stale-orphan", show_key(key), f"inode {ino} is on the orphan list but {stale}",
                          "drop the key", partial(repair.delete_keys, ctx.meta.kv, key), ino=ino)
        elif ino not in ns.dirs and ctx.meta.getattr(ino).nlink == 0:
            freed.add(ino)
            yield Finding("unlinked-inode", f"inode {ino} ({show_key(key)})",
                          "unlinked while open and never freed (the next mount would free it)",
                          "free it and retire its blocks", partial(ctx.meta.reclaim, ino), ino=ino)
    return freed


def _adopt_unnamed(
    ctx: Context, ns: Namespace, lost_found: repair.LostFound, reached: set[int], freed: set[int],
) -> Iterator[Finding]:
    for ino in sorted(ns.inodes.keys() - reached - freed):
        if ns.names[ino] or ino in reached:
            continue
        yield Finding("orphan-inode", f"inode {ino}", "no directory entry names it: it cannot be reached",
                      f"link it as /lost+found/#{ino}", partial(lost_found.adopt, ino), ino=ino)
        ns.walk(ctx.meta, ino, reached)


def _cut_loops(
    ctx: Context, ns: Namespace, lost_found: repair.LostFound, reached: set[int],
) -> Iterator[Finding]:
    """Directories still unreached hang below a loop of directories that contain each other."""
    for ino in sorted(ns.dirs.keys() - reached):
        if ino in reached:
            continue
        member = _loop_member(ns, ino)
        parent, name = ns.entry[member]
        yield Finding(
            "directory-loop", f"directory inode {member} ({ns.entry_path(parent, name)})",
            "it lies inside itself through its parents, cut off from the root",
            f"remove its entry and link it as /lost+found/#{member}",
            partial(lost_found.adopt, member, (parent, name)), ino=member,
        )
        ns.walk(ctx.meta, member, reached)


def _loop_member(ns: Namespace, ino: int) -> int:
    """A directory on the loop above `ino`: each unreached directory has an entry in another."""
    seen: set[int] = set()
    while ino not in seen:
        seen.add(ino)
        ino = ns.entry[ino][0]
    return ino
