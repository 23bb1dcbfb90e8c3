"""This mount as one node of a shared volume: its session, heartbeats, open-file holds, the
lease that keeps volume-wide duties on one node, and close-to-open checks of files that
other nodes may have changed."""

import errno
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable

import trio

from aifs import __version__
from aifs.cluster.peers import peer_addresses
from aifs.config.models import MetaConfig
from aifs.errors import FsError
from aifs.meta import Inode, MetaEngine
from aifs.meta.sessions import Session, take_lease
from aifs.meta.writestate import MetaWriteFailed

log = logging.getLogger(__name__)

GC_LEASE = b"gc"
REMEMBERED_VERSIONS = 1 << 17
LET_GO_EVERY_S = 0.05  # holds of closed files are given back in one commit per interval


class ClusterNode:
    def __init__(self, meta: MetaEngine, node: str, mountpoint: str, settings: MetaConfig,
                 open_inodes: Callable[[], Iterable[int]], set_peers: Callable[[list[str], str], None]) -> None:
        """`set_peers` tells the block store the live mounts' block servers (and this one's) on each beat."""
        self._meta = meta
        self._heartbeat_s = settings.heartbeat
        self._set_peers = set_peers
        self.session = Session(meta.kv, node, mountpoint, __version__, settings.session_timeout, open_inodes)
        self._versions: OrderedDict[int, tuple[int, int, int]] = OrderedDict()  # ino: (size, mtime, ctime)
        self._letting_go: set[int] = set()  # closed here, hold not yet given back
        log.info("joined the volume as %s", self.session.info.describe())

    async def run(self) -> None:
        """Beat and watch the other sessions every heartbeat; an engine that is away for a
        while is logged, and the beats resume when it is back."""
        while True:
            try:
                self.session.beat()
                self.session.sweep()
                self._set_peers(peer_addresses(self.session.members), self.session.info.peer)
            except (MetaWriteFailed, OSError) as e:
                log.warning("heartbeat of %s failed: %s", self.session.info.describe(), e)
            await trio.sleep(self._heartbeat_s)

    def runs_duties(self) -> bool:
        """Whether this node runs the volume-wide duties (garbage deletion, orphan sweeps) now;
        not while the engine cannot be asked."""
        try:
            return take_lease(self._meta.kv, GC_LEASE, self.session.sid)
        except (MetaWriteFailed, OSError) as e:
            log.warning("cannot tell whether this node runs the volume's duties: %s", e)
            return False

    def opened(self, ino: int) -> Inode:
        """The first open of `ino` on this node holds it: its attributes as the engine has them
        now, or ENOENT when the file is gone. A file closed a moment ago is still held."""
        if ino in self._letting_go:
            self._letting_go.discard(ino)
            return self._meta.getattr(ino, fresh=True)
        record = self.session.hold(ino)
        if record is None:
            raise FsError(errno.ENOENT, f"inode {ino} was removed by another node")
        return Inode.decode(record)

    def closed(self, ino: int, removed: bool) -> None:
        """The last close here. The hold goes with the next batch, so that reading a file costs
        the engine one commit, not two; a file removed meanwhile is reclaimed a moment later (by
        the orphan sweep). A file already `removed` is let go at once, to be reclaimed now."""
        if removed:
            self.session.let_go([ino])
        else:
            self._letting_go.add(ino)

    async def let_go_in_batches(self) -> None:
        while True:
            await trio.sleep(LET_GO_EVERY_S)
            if self._letting_go:
                inos, self._letting_go = self._letting_go, set()
                try:
                    self.session.let_go(inos)
                except (MetaWriteFailed, OSError) as e:  # still held: the next batch tries again
                    log.warning("giving back the holds of %d closed files failed: %s", len(inos), e)
                    self._letting_go |= inos

    def changed_since_last_open(self, ino: int, node: Inode) -> bool:
        """Whether the file changed (here or on another node) since it was last opened here:
        the kernel's cached pages of it are then stale. A file not remembered counts as
        changed, which costs nothing when the kernel holds no pages of it."""
        version = (node.size, node.mtime_ns, node.ctime_ns)
        before = self._versions.pop(ino, None)
        self._versions[ino] = version
        if len(self._versions) > REMEMBERED_VERSIONS:
            self._versions.popitem(last=False)
        return before != version

    def leave(self) -> None:
        self.session.close()
