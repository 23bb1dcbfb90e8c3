"""Block refs against the objects the tiers hold, the upload (U) and garbage (G) queues,
and the usage counters (inodes, and bytes held by blocks) that statfs reports.

The ids of every object held and every block referenced are kept as sets of ints; block
maps are read one file at a time.
"""

from collections.abc import Iterator
from functools import partial
from itertools import groupby

from aifs.fsck import repair
from aifs.fsck.context import Context
from aifs.fsck.damage import check_damage
from aifs.fsck.report import Finding, show_key
from aifs.fsck.tiers import HeldBlocks
from aifs.meta import keys, usage
from aifs.meta.attrs import BlockRef
from aifs.meta.kv import KVStore
from aifs.tiers.checksum import checksum

FileBlocks = list[tuple[int, BlockRef]]


def check_blocks(ctx: Context) -> Iterator[Finding]:
    yield from check_damage(ctx)  # first: what it finds on NVMe counts as held below
    sweep = _BlockSweep(ctx)
    yield from sweep.block_maps()
    yield from sweep.lost_data()
    yield from sweep.queues()
    yield from sweep.unreferenced()
    yield from sweep.usage()
    ctx.stats["block refs"] = sweep.refs
    ctx.stats["objects"] = len(sweep.stored)


def queued_ids(kv: KVStore, tag: bytes) -> set[int]:
    return {keys.read_u64(key, 1) for key, _ in kv.scan(tag)}


def live_ids(kv: KVStore) -> set[int]:
    """Blocks the metadata still needs: every one a block ref points at, queued for upload
    (U) or retired and not deleted yet (G)."""
    referenced = {BlockRef.decode(value).block_id for _, value in kv.scan(keys.BLOCK)}
    return referenced | queued_ids(kv, keys.UPLOAD) | queued_ids(kv, keys.GARBAGE)


def staged_elsewhere(kv: KVStore, node: bytes) -> dict[int, str]:
    """Blocks queued for upload by other nodes of a shared volume (block id -> node): their
    only copy is on that node's NVMe, which this node cannot see."""
    return {keys.read_u64(key, 1): value[8:].decode() for key, value in kv.scan(keys.UPLOAD)
            if value[8:] not in (b"", node)}


def _intact(tier: HeldBlocks, ref: BlockRef) -> bool:
    """The check the read path makes: the whole object against the ref's checksum."""
    data = tier.get(ref.block_id)
    return data is not None and checksum(data) == ref.checksum


class _BlockSweep:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.meta = ctx.meta
        self.ns = ctx.namespace()
        self.held = {tier.name: set(tier.block_ids()) for tier in ctx.tiers}
        self.stored = set().union(*self.held.values())
        self.queued = queued_ids(self.meta.kv, keys.UPLOAD)
        self.elsewhere = staged_elsewhere(self.meta.kv, self.meta.node)
        self.retired = queued_ids(self.meta.kv, keys.GARBAGE)
        self.referenced: set[int] = set()
        self.lost: set[int] = set()
        self.refs = 0
        self.held_bytes = 0

    def _files(self) -> Iterator[tuple[int, FileBlocks]]:
        """The block map of each existing file (a file's refs sit together in its shard)."""
        scan = self.meta.kv.scan(keys.BLOCK)
        for ino, group in groupby(scan, key=lambda item: keys.read_u64(item[0], 1)):
            if ino in self.ns.inodes:
                yield ino, [(keys.read_u64(key, 9), BlockRef.decode(value)) for key, value in group]

    def block_maps(self) -> Iterator[Finding]:
        with_refs: set[int] = set()
        for ino, blocks in self._files():
            with_refs.add(ino)
            held = sum(ref.length for _, ref in blocks)
            self.held_bytes += held
            yield from self._check_alloc(ino, held)
            for _, ref in blocks:
                yield from self._check_ref(ino, ref)
        for ino in sorted(self.ns.allocated - with_refs):
            yield from self._check_alloc(ino, 0)

    def _check_alloc(self, ino: int, held: int) -> Iterator[Finding]:
        alloc = self.meta.getattr(ino).alloc
        if alloc != held:
            yield Finding(
                "wrong-alloc", f"inode {ino}", f"alloc is {alloc} bytes, its block refs hold {held}",
                f"set alloc to {held}", partial(repair.set_inode, self.meta, ino, alloc=held), ino=ino,
            )

    def _copies(self, ref: BlockRef) -> tuple[list[HeldBlocks], list[HeldBlocks]]:
        """(intact, corrupt) copies of a ref's object; without --verify every copy counts as intact."""
        copies = [tier for tier in self.ctx.tiers if ref.block_id in self.held[tier.name]]
        if not self.ctx.verify:
            return copies, []
        good = [tier for tier in copies if _intact(tier, ref)]
        return good, [tier for tier in copies if tier not in good]

    def _check_ref(self, ino: int, ref: BlockRef) -> Iterator[Finding]:
        self.refs += 1
        self.referenced.add(ref.block_id)
        good, bad = self._copies(ref)
        if not good and ref.block_id in self.elsewhere:
            yield Finding("staged-elsewhere", f"object {ref.block_id:016x} (inode {ino})",
                          f"not uploaded yet: only node {self.elsewhere[ref.block_id]} holds it, on its NVMe; "
                          "mount that node's state directory again so that it uploads it",
                          ino=ino, block=ref.block_id)
            return
        if not good:
            self.lost.add(ino)
            return
        for tier in bad:
            yield Finding("corrupt-copy", f"object {ref.block_id:016x} in {tier.name} (inode {ino})",
                          f"fails its checksum; the copy in {good[0].name} is intact",
                          f"delete the bad copy from {tier.name}", partial(tier.delete, ref.block_id),
                          ino=ino, block=ref.block_id)
        if good == [self.ctx.nvme] and ref.block_id not in self.queued:
            key = keys.upload(ref.block_id)
            yield Finding("unqueued-upload", f"object {ref.block_id:016x} (inode {ino})",
                          "held only on NVMe and not queued for upload: it would never reach the "
                          "object store and NVMe may evict it", f"queue it for upload ({show_key(key)})",
                          partial(repair.queue_upload, self.meta.kv, ref), ino=ino, block=ref.block_id)

    def lost_data(self) -> Iterator[Finding]:
        """Refs whose object no tier holds intact, named by file path and byte range."""
        paths = self.ns.file_paths(self.meta.kv, self.lost)
        for ino in sorted(self.lost):
            for index, ref in self.meta.all_block_refs(ino).items():
                good, bad = self._copies(ref)
                if not good:
                    yield self._lost(paths[ino], ino, index, ref, corrupt=bool(bad))

    def _lost(self, path: str, ino: int, index: int, ref: BlockRef, corrupt: bool) -> Finding:
        start = index * self.meta.block_size
        tiers = ", ".join(tier.name for tier in self.ctx.tiers)
        why = "every copy fails its checksum" if corrupt else f"its object is in no tier ({tiers})"
        return Finding(
            "corrupt-block" if corrupt else "missing-block",
            f"{path} bytes [{start}, {start + ref.length}) (inode {ino}, block {index}, "
            f"object {ref.block_id:016x})",
            f"{why}: these bytes are lost", ino=ino, block=ref.block_id,
        )

    def queues(self) -> Iterator[Finding]:
        kv = self.meta.kv
        for block_id in sorted(self.retired & self.referenced):
            key = keys.garbage(block_id)
            yield Finding("live-garbage", show_key(key), "a block still in use is queued for deletion",
                          "drop the key", partial(repair.delete_keys, kv, key), block=block_id)
        for block_id in sorted(self.queued - self.referenced):
            key = keys.upload(block_id)
            yield Finding("stale-upload", show_key(key), "a block no file uses is queued for upload",
                          "drop the key", partial(repair.delete_keys, kv, key), block=block_id)

    def unreferenced(self) -> Iterator[Finding]:
        for block_id in sorted(self.stored - self.referenced - self.retired):
            where = tuple(tier for tier in self.ctx.tiers if block_id in self.held[tier.name])
            yield Finding(
                "unreferenced-object", f"object {block_id:016x} in {', '.join(t.name for t in where)}",
                "no block ref uses it and it is not queued for deletion",
                "delete it", partial(repair.delete_object, where, block_id), block=block_id,
            )

    def usage(self) -> Iterator[Finding]:
        """The counters against the inodes that exist and the bytes their block refs hold."""
        counted = (self.meta.usage.inodes, self.meta.usage.bytes)
        expected = (len(self.ns.inodes), self.held_bytes)
        if counted != expected:
            yield Finding(
                "wrong-usage", show_key(usage.INODES),
                f"counters say {counted[0]} inodes and {counted[1]} bytes; the volume holds "
                f"{expected[0]} inodes and {expected[1]} bytes in blocks",
                "rewrite the counters", partial(repair.set_usage, self.meta, *expected),
            )
