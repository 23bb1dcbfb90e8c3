"""The block map of files and the two queues it feeds: pending uploads and garbage.

A block ref is replaced, never edited: the old block id goes to the garbage queue
with a not-before time, and its pending upload (if any) is dropped with it.
"""

from collections.abc import Iterable

import msgpack

from aifs.meta import keys
from aifs.meta.attrs import BlockRef, Inode
from aifs.meta.kv import Batch
from aifs.meta.packs import PackMember
from aifs.meta.queues import due_in
from aifs.meta.txn import Txn, retried

DEFAULT_GRACE_NS = 5 * 10**9


def queue_upload(batch: Batch, ref: BlockRef, node: bytes = b"") -> None:
    """Queue an object for upload by `node`, the one whose NVMe stages it (empty on a volume
    of one node); the checksum lets the uploader refuse a rotten staged copy."""
    batch.put(keys.upload(ref.block_id), keys.u64(ref.checksum) + node)


class BlockMapOps:
    """Mixed into MetaEngine; needs `kv`, `usage`, `block_size`, `garbage_grace_ns`, `node`
    and PackOps."""

    def block_refs(self, ino: int, indexes: Iterable[int]) -> dict[int, BlockRef]:
        indexes = list(indexes)
        values = self.kv.multi_get([keys.block(ino, i) for i in indexes])
        return {i: BlockRef.decode(v) for i, v in zip(indexes, values) if v is not None}

    def block_ref_values(self, ino: int) -> dict[int, bytes]:
        """The stored block refs of `ino` by index, as bytes (what a later commit may expect)."""
        return {keys.read_u64(k, 9): v for k, v in self.kv.scan(keys.block_prefix(ino))}

    def all_block_refs(self, ino: int) -> dict[int, BlockRef]:
        prefix = keys.block_prefix(ino)
        return {keys.read_u64(k, 9): BlockRef.decode(v) for k, v in self.kv.scan(prefix)}

    @retried
    def commit_blocks(
        self, ino: int, refs: dict[int, BlockRef], size: int, mtime_ns: int | None = None,
    ) -> Inode:
        """Point blocks of `ino` at new objects, set its size, queue the new objects for upload."""
        txn = Txn(self.kv)
        node = txn.touch(ino, mtime=mtime_ns is None)
        if mtime_ns is not None:
            node.mtime_ns = mtime_ns
        self._finish(txn, node, size, self._replace_refs(txn, ino, refs))
        return node

    @retried
    def truncate(self, ino: int, size: int, cut: tuple[int, BlockRef] | None) -> Inode:
        """Set the size; blocks past the end are retired, `cut` replaces the partial last block."""
        txn = Txn(self.kv)
        node = txn.touch(ino)
        keep = -(-size // self.block_size)
        delta = -self.retire_blocks(txn, ino, keep)
        if cut is not None:
            delta += self._replace_refs(txn, ino, dict([cut]))
        self._finish(txn, node, size, delta)
        return node

    def _replace_refs(self, txn: Txn, ino: int, refs: dict[int, BlockRef]) -> int:
        """Point blocks at new objects, retiring the old ones; returns the change in bytes held."""
        indexes = list(refs)
        stored = txn.multi_get([keys.block(ino, i) for i in indexes])
        old = {i: BlockRef.decode(v) for i, v in zip(indexes, stored) if v is not None}
        delta = 0
        for index, ref in refs.items():
            if index in old:
                delta -= self._retire(txn, old[index])
            txn.batch.put(keys.block(ino, index), ref.encode())
            queue_upload(txn.batch, ref, self.node)
            delta += ref.length
        return delta

    def _finish(self, txn: Txn, node: Inode, size: int, delta: int) -> None:
        """Set the size and bytes held of the file and the volume, and commit."""
        node.size = size
        node.alloc += delta
        self.usage.add(txn.batch, nbytes=delta)
        txn.commit()

    def retire_blocks(self, txn: Txn, ino: int, first_index: int) -> int:
        """Drop every block ref of `ino` from `first_index` on; returns the bytes they held."""
        freed = 0
        for key, value in txn.scan(keys.block_prefix(ino), keys.block(ino, first_index)):
            txn.batch.delete(key)
            freed += self._retire(txn, BlockRef.decode(value))
        return freed

    def _retire(self, txn: Txn, ref: BlockRef) -> int:
        not_before = txn.now + self.garbage_grace_ns
        txn.batch.put(keys.garbage(ref.block_id), msgpack.packb(not_before))
        txn.batch.delete(keys.upload(ref.block_id))
        return ref.length

    # -- queues ------------------------------------------------------------

    def pending_uploads(self) -> dict[int, int]:
        """This node's write-back queue (block id -> checksum); read once at mount, then kept in
        memory. Blocks other nodes staged are theirs to upload: this node does not hold them."""
        return {keys.read_u64(key, 1): keys.read_u64(value)
                for key, value in self.kv.scan(keys.UPLOAD) if value[8:] == self.node}

    def pending_elsewhere(self) -> dict[int, tuple[int, str]]:
        """The write-back queues of the other nodes: block id -> (checksum, node id)."""
        return {keys.read_u64(key, 1): (keys.read_u64(value), value[8:].decode())
                for key, value in self.kv.scan(keys.UPLOAD) if value[8:] != self.node}

    def pending_among(self, block_ids: list[int]) -> list[int]:
        """Those of `block_ids` some node has yet to upload, asked of the engine in one go."""
        found = self.kv.multi_get([keys.upload(b) for b in block_ids]) if block_ids else []
        return [b for b, value in zip(block_ids, found) if value is not None]

    def is_pending(self, block_id: int) -> bool:
        return self.kv.get_fresh(keys.upload(block_id)) is not None

    def staged_on(self, block_id: int) -> str | None:
        """The node whose NVMe holds `block_id` while it waits for upload; None once uploaded."""
        value = self.kv.get_fresh(keys.upload(block_id))
        return None if value is None else value[8:].decode() or "this node"

    @retried
    def uploads_done(self, block_ids: list[int], packs: dict[int, list[PackMember]] | None = None) -> list[int]:
        """Clear the upload records of blocks now durable, and record the packs that hold
        some of them (`packs`: pack id -> members), in one commit. Returns the blocks whose
        records stay: members of a pack this node may no longer record, to upload again."""
        txn = Txn(self.kv)
        kept = set()
        for pack_id, members in (packs or {}).items():
            if not self.record_pack(txn, pack_id, members):
                kept.update(m.block_id for m in members)
        for block_id in block_ids:
            if block_id not in kept:
                txn.batch.delete(keys.upload(block_id))
                txn.batch.delete(keys.rush(block_id))
        txn.commit()
        return [b for b in block_ids if b in kept]

    def rush_upload(self, block_id: int) -> None:
        """Ask the node that staged `block_id` to upload it before its other queued blocks:
        it hears the key in the engine's pushes (`rushed`)."""
        batch = Batch()
        batch.put(keys.rush(block_id), self.node)
        self.kv.commit(batch)

    def garbage_due(self, limit: int = 1024, now_ns: int | None = None) -> list[int]:
        return due_in(self.kv, keys.GARBAGE, limit, now_ns)

    def garbage_done(self, block_ids: list[int]) -> None:
        txn = Txn(self.kv)
        for block_id in block_ids:
            txn.batch.delete(keys.garbage(block_id))
        txn.commit()
