"""A mounted volume: metadata, tiers, open files and the background movers, from one config."""

import errno
import logging
import time
from functools import partial

import trio

from aifs.blockstore.compose import open_tier_manager
from aifs.cluster.peers import PeerServer
from aifs.config import Config, Rule
from aifs.errors import FsError
from aifs.meta import Inode, MetaEngine, keys
from aifs.meta.attrs import BlockRef
from aifs.meta.engines import open_kv
from aifs.meta.feed import ChangeFeed
from aifs.tiers.checksum import Buffer
from aifs.tiers.s3_marker import MarkerMode
from aifs.vfs.adoption import Adopter
from aifs.vfs.cluster import ClusterNode
from aifs.vfs.filedata import FileData
from aifs.vfs.groupcommit import GroupCommit
from aifs.vfs.locks import FileLocks
from aifs.vfs.names import NameCache
from aifs.vfs.namespace import Namespace
from aifs.vfs.openfile import Handle, OpenFile, OpenFiles
from aifs.vfs.orderfetch import OrderPrefetcher
from aifs.vfs.pinning import Pinner
from aifs.vfs.prefetch import Prefetcher
from aifs.vfs.readahead import DEFAULT_LIMIT, Readahead
from aifs.vfs.repack import Repacker
from aifs.vfs.statedir import VolumeLock, node_id, prepare_state_dir
from aifs.vfs.writeback import GarbageCollector, Uploader

log = logging.getLogger(__name__)

RELATIME_NS = 24 * 3600 * 10**9


class Volume:
    def __init__(self, config: Config, lock: VolumeLock | None = None, accept_missing_marker: bool = False,
                 mountpoint: str = "") -> None:
        """Open the volume under `lock` (taken here when not given). A bucket without a volume
        marker is refused while the metadata refers to file data, unless `accept_missing_marker`.
        On a shared engine the mount joins the volume as a node with a session of its own."""
        self.config = config
        self.state_dir = config.volume.state_dir
        if lock is None:
            prepare_state_dir(self.state_dir)
            lock = VolumeLock.acquire(self.state_dir, "volume")
        self._lock = lock
        self.peer_server = PeerServer(config.cluster) if config.cluster.serve is not None else None
        kv = ChangeFeed(open_kv(config))
        node = node_id(self.state_dir) if kv.shared else ""
        self.meta = MetaEngine(kv, config.volume.block_size, int(config.writeback.garbage_grace * 10**9),
                               node.encode())
        self._check_block_size()
        expect_marker = self.meta.volume_stats()[1] > 0 and not accept_missing_marker  # it holds file data
        self.tiers = open_tier_manager(config, self.meta.volume, self.meta,
                                       MarkerMode.EXPECT if expect_marker else MarkerMode.CLAIM)
        self.files = OpenFiles(lambda ino: kv.changed([keys.inode(ino)]))
        self.cluster = ClusterNode(self.meta, node, mountpoint, config.meta, lambda: [of.ino for of in self.files.all()],
                                   self.tiers.set_peers) if kv.shared else None
        self.locks = FileLocks(kv, self.cluster.session if self.cluster is not None else None,
                               self._store_writes, config.fuse.max_tasks // 2)
        self.names = NameCache()
        self.ns = Namespace(self.meta, self.names, self.is_open)
        self.uploader = Uploader(self.meta, self.tiers, self.files, config.writeback)
        self.pinner = Pinner(self.meta, self.tiers)
        self.prefetch = Prefetcher(self.tiers, self.spawn)
        self.sample_order = OrderPrefetcher(self.meta, self.tiers, self.spawn, config.prefetch)
        self.data = FileData(self.meta, self.tiers, self._blocks_committed, self.prefetch,
                             lambda ino: self.pinner.pins.get(ino) == "ram", config.meta.remote_block_wait)
        self._nursery: trio.Nursery | None = None
        self.repacker = Repacker(self.meta, self.tiers, config.writeback)
        self.gc = GarbageCollector(self.meta, self.tiers, self.files, self.repacker,
                                   self.cluster.runs_duties if self.cluster is not None else None)
        self.adopter = Adopter(self.meta, self.tiers, self.cluster, config.meta.heartbeat,
                               config.writeback.upload_concurrency) if self.cluster is not None else None
        self._sync_meta = GroupCommit(self.meta.sync)
        self.left_pending: tuple[int, int] | None = None  # (blocks, bytes) not yet durable at close
        self._recover()

    def _check_block_size(self) -> None:
        if self.meta.block_size != self.config.volume.block_size:
            log.warning(
                "volume.block_size = %d in the config, but this volume was formatted with %d; using %d",
                self.config.volume.block_size, self.meta.block_size, self.meta.block_size,
            )

    def _recover(self) -> None:
        """Resume what a crash interrupted: dirty blocks stay pinned, blocks staged for a
        commit that never happened are dropped, packs being put are abandoned (their blocks
        are still queued), orphans are freed."""
        dropped = self.tiers.recover_staged(self.meta.pending_uploads())
        if dropped:
            log.info("dropped %d block(s) staged by writes whose metadata commit never happened "
                     "(the daemon stopped between the two): %s", len(dropped),
                     " ".join(f"{b:016x}" for b in dropped[:10]))
        self.meta.abandon_packs(self.meta.unfinished_packs())
        self.gc.reclaim_orphans()

    def _blocks_committed(self, ino: int, refs: list[BlockRef]) -> None:
        """New blocks of a file: queued for upload (at once, beside the writers, when the
        path's rule waits for the durable tier anyway; packed as the path's rule says) and
        pinned if the file is."""
        rule = self.rule_of(ino)
        self.uploader.enqueue(refs, None if rule is None else rule.pack_below)
        if self.config.durability(rule) == "remote":
            self.uploader.hurry([ref.block_id for ref in refs])
        self.pinner.blocks_added(ino, refs)

    async def run_background(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        nursery.start_soon(self.uploader.run)
        nursery.start_soon(self.gc.run)
        if self.peer_server is not None and self.cluster is not None:
            nursery.start_soon(self.peer_server.run, self.tiers)
            self.cluster.session.advertise(self.peer_server.address)
        if self.cluster is not None and self.adopter is not None:
            nursery.start_soon(self.cluster.run)
            nursery.start_soon(self.cluster.let_go_in_batches)
            nursery.start_soon(self.adopter.run)
            self.meta.kv.subscribe(partial(self._rushed, trio.lowlevel.current_trio_token()), from_others=True)
        self.spawn(self.pinner.restore)
        self.spawn(self.tiers.open_on_loop)

    def _rushed(self, loop: trio.lowlevel.TrioToken, changed: list[bytes] | None) -> None:
        """On the engine's thread: readers on other nodes wait for blocks staged here."""
        blocks = keys.rushed(changed or [])
        if blocks:
            try:
                trio.from_thread.run_sync(self.uploader.hurry, blocks, trio_token=loop)
            except trio.RunFinishedError:  # unmounting: what is queued stays queued
                pass

    def spawn(self, fn, *args) -> bool:
        """Run a background job in the volume's nursery; its failure is logged, never fatal.

        False when the volume is not serving (no nursery yet), so the job was not started.
        """
        if self._nursery is None:
            return False

        async def guarded() -> None:
            try:
                await fn(*args)
            except Exception:  # noqa: BLE001 - a background job must not take the mount down
                log.exception("background job %s%r failed", getattr(fn, "__name__", fn), args)

        self._nursery.start_soon(guarded)
        return True

    async def close(self) -> None:
        """Seal every buffer and make the metadata durable; the volume can then be reopened.
        What is still waiting for the durable tier stays staged for the next mount, and is
        counted in `left_pending` (blocks, bytes). Everything is closed even when a seal
        fails (a full disk); the failure is raised at the end."""
        unsealed = await self._seal_all()
        pending = self.uploader.pending
        self.left_pending = (len(pending), self.tiers.pending_bytes(pending))
        try:
            await self.tiers.close()
        finally:
            try:
                if self.cluster is not None:
                    self.cluster.leave()
            finally:
                try:
                    self.meta.close()
                finally:
                    self.tiers.close_staging()
                    self._lock.close()
        if unsealed:
            raise FsError(unsealed[0].errno, f"{len(unsealed)} open file(s) could not be sealed at unmount, "
                                             f"their unsaved writes are lost: {unsealed[0]}")

    async def _seal_all(self) -> list[FsError]:
        failures = []
        for of in self.files.all():
            try:
                async with of.lock:
                    await self.data.seal(of)
            except FsError as e:
                log.error("sealing inode %d at unmount failed: %s", of.ino, e)
                failures.append(e)
        return failures

    # -- attributes --------------------------------------------------------

    def getattr(self, ino: int) -> Inode:
        """Attributes with the live size and mtime of an open file."""
        return self._live(ino, self.meta.getattr(ino))

    def getattrs(self, inos: list[int]) -> list[Inode | None]:
        """`getattr` of many inodes at once (a directory listing); None for one that is gone."""
        nodes = self.meta.getattrs(inos)
        return [None if node is None else self._live(ino, node) for ino, node in zip(inos, nodes)]

    def _live(self, ino: int, node: Inode) -> Inode:
        of = self.files.get(ino)
        if of is not None:
            node.size = of.size
            if of.mtime_ns is not None:
                node.mtime_ns = of.mtime_ns
        return node

    async def set_size(self, ino: int, size: int) -> None:
        of = self.files.get(ino)
        if of is None:
            await self.data.truncate(ino, None, size)
            return
        async with of.lock:
            await self.data.truncate(ino, of, size)
            of.mtime_ns = None

    # -- open files --------------------------------------------------------

    def open(self, ino: int, for_reading: bool, for_writing: bool = False) -> Handle:
        """Open a file; an open for reading records the access (relatime rules).

        Reads are mostly served by the kernel's page cache without a request, so
        the open is where an access can be seen at all. The path's rule sets the
        readahead cap, and a `pin` rule pins the file on its first open or create.
        On a shared volume an open asks the engine itself (close-to-open), unless the
        file is frozen; a frozen file cannot be opened for writing (EROFS).
        """
        node = self.meta.getattr(ino)
        if node.frozen and for_writing:
            raise FsError(errno.EROFS, f"inode {ino} is in a frozen tree; `aifs thaw` it to write to it")
        node, holds = self._as_the_engine_has_it(ino, node)
        now = time.time_ns()
        if for_reading and (node.atime_ns <= max(node.mtime_ns, node.ctime_ns)
                            or now - node.atime_ns > RELATIME_NS):
            self.meta.set_atime(ino, now)
        of = self.files.acquire(ino, node.size)
        of.held = of.held or holds
        if for_reading:
            self.data.heat.opened(ino)
            self.sample_order.touched(ino)
        rule = self.rule_of(ino)
        if of.readahead is None:
            limit = rule.readahead if rule is not None and rule.readahead is not None else DEFAULT_LIMIT
            of.readahead = Readahead(self.meta.block_size, limit)
            of.ranged = rule is None or rule.fetch == "range"
        if rule is not None and rule.pin is not None and self.pinner.pin_by_rule(ino, rule.pin):
            self.spawn(self.pinner.load, ino)
        return Handle(of, stale_pages=self.cluster is not None and self.cluster.changed_since_last_open(ino, node))

    def _as_the_engine_has_it(self, ino: int, node: Inode) -> tuple[Inode, bool]:
        """On a shared volume, the attributes the engine itself has (close-to-open), and whether
        this open took the node's hold on the file: its first open here holds it, so an unlink on
        any node keeps it until this node lets go, and reads it in the same commit. A frozen file
        cannot change or be unlinked, so its opens cost the engine nothing."""
        if self.cluster is None or node.frozen:
            return node, False
        if self.files.is_open(ino):
            return self.meta.getattr(ino, fresh=True), False
        return self.cluster.opened(ino), True

    def rule_of(self, ino: int) -> Rule | None:
        """The config rule for the file's path, or None without rules or a known path."""
        if not self.config.rules:
            return None
        path = self.names.path_of(ino)
        return None if path is None else self.config.rule_for(path)

    def direct_writes(self, ino: int) -> bool:
        """Whether write-only opens of the file bypass the kernel's page cache: its rule
        says, else [fuse] direct_writes (aifs.fuse.cachemode)."""
        rule = self.rule_of(ino)
        if rule is not None and rule.direct_writes is not None:
            return rule.direct_writes
        return self.config.fuse.direct_writes

    async def read(self, handle: Handle, offset: int, size: int) -> Buffer:
        of = handle.file
        return await self.data.read(of.ino, of, of.size, offset, size)

    async def write(self, handle: Handle, offset: int, data: bytes) -> None:
        of = handle.file
        self._check_capacity(of, offset + len(data))
        handle.wrote = True
        async with of.lock:
            await self.data.write(of, offset, data)
        self.files.wrote(of)

    def _check_capacity(self, of: OpenFile, end: int) -> None:
        """A write that grows a file past an explicit volume.capacity fails with ENOSPC
        (overwrites inside a file still work): the capacity df shows is a real limit."""
        limit = self.config.volume.capacity
        if limit is not None and end > of.size and self.meta.volume_stats()[1] + end - of.size > limit:
            raise FsError(errno.ENOSPC, f"the volume holds its whole capacity of {limit} bytes "
                                        "(volume.capacity); delete files or raise the capacity")

    async def flush_handle(self, handle: Handle) -> None:
        """close() of one handle: one that wrote seals the file (flush); one that only read
        seals nothing, so a full staging area fails only the closes of writers."""
        if handle.wrote:
            await self.flush(handle.file)

    async def flush(self, of: OpenFile) -> None:
        """close(): blocks staged and metadata committed, not yet synced (docs/architecture.md);
        then what the file's durability asks for (`_make_durable`)."""
        if of.dirty or of.lock.locked():  # most closes, and every read-only one, have nothing to seal
            async with of.lock:
                await self.data.seal(of)
        await self._make_durable(of.ino)

    async def _store_writes(self, ino: int) -> None:
        """What this node wrote to `ino` is stored as at close(), before a lock on it changes."""
        of = self.files.get(ino)
        if of is not None:
            await self.flush(of)

    async def fsync(self, handle: Handle) -> None:
        of = handle.file
        async with of.lock:
            await self.data.seal(of)
            staged, of.unsynced = of.unsynced, []
        await self.tiers.sync(staged)
        await self._sync_meta()
        await self._make_durable(of.ino)

    def durability_of(self, ino: int) -> str:
        """"local", "cluster" or "remote" (see Config.durability)."""
        return self.config.durability(self.rule_of(ino))

    async def _make_durable(self, ino: int) -> None:
        """Under "remote", the file's blocks uploaded; under "cluster", pinned on the flash
        servers; under "local", nothing more than staged on this node."""
        durability = self.durability_of(ino)
        if durability == "remote":
            await self.upload_now([ino])
        elif durability == "cluster":
            await self.tiers.replicate(self.uploader.pending_of(self._blocks_of([ino])))

    def pending_blocks(self, inodes: list[int]) -> list[int]:
        """Blocks of these files that are not yet in the durable tier."""
        return self.pending_among(self._blocks_of(inodes))

    def pending_among(self, blocks: list[int]) -> list[int]:
        """Those of `blocks` not yet in the durable tier: in this node's queue, or, on a shared
        volume, in another node's."""
        return self.meta.pending_among(blocks) if self.cluster is not None else self.uploader.pending_of(blocks)

    def _blocks_of(self, inodes: list[int]) -> list[int]:
        return [ref.block_id for ino in inodes for ref in self.meta.all_block_refs(ino).values()]

    def file_state(self, ino: int) -> dict:
        """Is the file fully in the durable tier? ("uploaded", "pending" or "unsealed")."""
        of = self.files.get(ino)
        unsealed = of.dirty_bytes if of is not None else 0
        pending = self.pending_blocks([ino])
        state = "unsealed" if unsealed else "pending" if pending else "uploaded"
        return {"state": state, "unsealed_bytes": unsealed, "pending_blocks": len(pending),
                "pending_bytes": self.tiers.pending_bytes(pending)}

    async def upload_now(self, inodes: list[int]) -> None:
        """Return once every sealed block of these files is in the durable tier."""
        pending = self.pending_blocks(inodes)
        self.uploader.hurry(pending)
        await self.uploader.wait_uploaded(pending)

    async def release(self, handle: Handle) -> None:
        """The end of a handle: what it wrote after its last close(), or what anyone left for the
        last handle (written back from a mapping, say), is sealed now. Whatever happens, the
        handle stops counting as open."""
        of = handle.file
        try:
            if handle.wrote or of.handles == 1:
                await self.flush(of)
        finally:
            last = self.files.release(of)
        if not last:
            return
        if of.written and not self.files.writing:
            self.uploader.writers_closed()
        removed = self.meta.getattr(of.ino).nlink == 0  # on a shared volume, a removal elsewhere is pushed here
        if of.held:
            self.cluster.closed(of.ino, removed)
        if removed:
            self.meta.reclaim(of.ino)

    async def sync_all(self) -> None:
        await self._sync_meta()

    def is_open(self, ino: int) -> bool:
        return self.files.is_open(ino)

    def statfs(self) -> tuple[int, int, int]:
        """(capacity, free bytes, inodes) as df shows them: the volume's own data against
        volume.capacity, by default the durable tier's capacity (never the host disk's usage)."""
        capacity = self.config.volume.capacity or self.tiers.durable_capacity
        inodes, used = self.meta.volume_stats()
        return capacity, max(capacity - used, 0), inodes
