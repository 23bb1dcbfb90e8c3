"""pyfuse3 request handlers: each translates one FUSE request into volume and metadata calls."""

import fcntl
import json
import logging
import os
import stat
import sys

import pyfuse3

from aifs.bypass.address import advertised
from aifs.bypass.protocol import XATTR as BYPASS_XATTR
from aifs.fuse.attrs import Timeouts, entry_attributes, negative_entry
from aifs.fuse.cachemode import CacheModes
from aifs.fuse.errors import translate_errors
from aifs.fuse.listing import DirListing
from aifs.fuse.pagestore import PageStore
from aifs.fuse.replies import NAME_ENTRIES, entry_reply, open_reply, opendir_reply
from aifs.metrics import instrument_operations
from aifs.vfs.openfile import Handle
from aifs.vfs.volume import Volume

log = logging.getLogger(__name__)

CLUSTER_LOCKS = hasattr(pyfuse3.Operations, "setlk")  # pyfuse3 passes lock requests on (deploy/patches)
STATE_XATTR = b"user.aifs.state"  # read-only view of whether a file is in the durable tier
CAPABILITY_XATTR = b"security.capability"
_TIME_FIELDS = (
    ("update_atime", "atime_ns", "st_atime_ns"),
    ("update_mtime", "mtime_ns", "st_mtime_ns"),
    ("update_ctime", "ctime_ns", "st_ctime_ns"),
)


@instrument_operations
@translate_errors
class AifsOperations(pyfuse3.Operations):
    # Write-through: with the kernel's writeback cache, the kernel owns a file's mtime and
    # direct writes (aifs.fuse.cachemode) never change it. Small cached writes cost one
    # request each either way: the kernel asks for security.capability before each one.
    enable_writeback_cache = False
    supports_dot_lookup = True

    def __init__(self, volume: Volume, timeouts: Timeouts, listing_attributes: int) -> None:
        super().__init__()
        self.vol = volume
        self.ns = volume.ns
        self.timeouts = timeouts
        # released pyfuse3 cannot send an entry without attributes, so every entry carries them
        self.listing_attributes = listing_attributes if NAME_ENTRIES else sys.maxsize
        self._files: dict[int, Handle] = {}
        self._modes = CacheModes()
        self._pages = PageStore(self._modes)
        volume.data.page_cache = self._pages
        self._dirs: dict[int, DirListing] = {}
        self._next_fh = 1
        if volume.cluster is not None and not CLUSTER_LOCKS:
            log.warning("the installed pyfuse3 does not pass file locks to aifs: flock and fcntl locks "
                        "hold on this node only, not on the volume's other nodes (deploy/install.sh "
                        "installs a pyfuse3 that does)")

    def _entry(self, ino: int) -> pyfuse3.EntryAttributes:
        return entry_attributes(ino, self.vol.getattr(ino), self.timeouts)

    def _new_fh(self) -> int:
        self._next_fh += 1
        return self._next_fh

    # -- names -------------------------------------------------------------

    async def lookup(self, parent_inode, name, ctx):
        ino = self.ns.lookup(parent_inode, name)
        return negative_entry(self.timeouts) if ino is None else self._entry(ino)

    async def forget(self, inode_list):
        """Inodes live in the metadata; only what is known of their cached pages is dropped."""
        self._modes.forget([inode for inode, _ in inode_list])

    async def _make(self, parent, name, mode, ctx, rdev=0, target=None):
        return self.ns.create(parent, name, mode, ctx.uid, ctx.gid, rdev, target)

    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        return self._entry(await self._make(parent_inode, name, mode, ctx, rdev))

    async def mkdir(self, parent_inode, name, mode, ctx):
        mode = stat.S_IFDIR | stat.S_IMODE(mode)
        return self._entry(await self._make(parent_inode, name, mode, ctx))

    async def symlink(self, parent_inode, name, target, ctx):
        mode = stat.S_IFLNK | 0o777
        return self._entry(await self._make(parent_inode, name, mode, ctx, target=target))

    async def readlink(self, inode, ctx):
        return self.ns.readlink(inode)

    async def link(self, inode, new_parent_inode, new_name, ctx):
        self.ns.link(inode, new_parent_inode, new_name)
        return self._entry(inode)

    async def unlink(self, parent_inode, name, ctx):
        self.ns.unlink(parent_inode, name)

    async def rmdir(self, parent_inode, name, ctx):
        self.ns.rmdir(parent_inode, name)

    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        self.ns.rename(parent_inode_old, name_old, parent_inode_new, name_new, flags)

    # -- attributes --------------------------------------------------------

    async def getattr(self, inode, ctx):
        return self._entry(inode)

    async def setattr(self, inode, attr, fields, fh, ctx):
        if fields.update_size:
            await self._pages.settled(inode)
            await self.vol.set_size(inode, attr.st_size)
        changes = {}
        if fields.update_mode:
            old = self.vol.getattr(inode).mode
            changes["mode"] = stat.S_IFMT(old) | stat.S_IMODE(attr.st_mode)
        if fields.update_uid:
            changes["uid"] = attr.st_uid
        if fields.update_gid:
            changes["gid"] = attr.st_gid
        for flag, field, source in _TIME_FIELDS:
            if getattr(fields, flag):
                changes[field] = getattr(attr, source)
        if changes or not fields.update_size:
            self.ns.set_attributes(inode, **changes)
        of = self.vol.files.get(inode)
        if of is not None and "mtime_ns" in changes:
            of.mtime_ns = changes["mtime_ns"]
        return self._entry(inode)

    async def statfs(self, ctx):
        capacity, free, inodes = self.vol.statfs()
        block = 4096
        out = pyfuse3.StatvfsData()
        out.f_bsize = out.f_frsize = block
        out.f_blocks = capacity // block
        out.f_bfree = out.f_bavail = free // block
        out.f_files = inodes + (1 << 32)
        out.f_ffree = out.f_favail = 1 << 32
        out.f_namemax = 255
        return out

    # -- extended attributes -----------------------------------------------

    async def getxattr(self, inode, name, ctx):
        if name == STATE_XATTR:
            return json.dumps(self.vol.file_state(inode)).encode()
        if name == BYPASS_XATTR and inode == pyfuse3.ROOT_INODE:  # only the root: paths are relative to it
            return advertised(self.vol.config)
        return self.ns.get_xattr(inode, name)

    async def setxattr(self, inode, name, value, ctx):
        self.ns.set_xattr(inode, name, value)

    async def listxattr(self, inode, ctx):
        return self.ns.list_xattrs(inode)

    async def removexattr(self, inode, name, ctx):
        self.ns.remove_xattr(inode, name)

    # -- files -------------------------------------------------------------

    def _open_handle(self, inode: int, flags: int) -> pyfuse3.FileInfo:
        fh = self._new_fh()
        write_only = flags & os.O_ACCMODE == os.O_WRONLY
        writes = _may_write(flags)
        wants_direct = write_only and self._may_write_directly(inode)
        handle = self._files[fh] = self.vol.open(inode, for_reading=not write_only, for_writing=writes)
        mode = self._modes.open(fh, inode, wants_direct, writes)
        quiet_close = not writes and not self.vol.locks.posix_held(inode)
        return open_reply(fh, direct_io=mode.direct_io, keep_cache=mode.keep_cache and not handle.stale_pages,
                          noflush=quiet_close)

    def _may_write_directly(self, inode: int) -> bool:
        """Set-id and capability-carrying files stay cached: a write through the cache has the
        kernel drop those privileges, a direct one asks the mount to (a flag pyfuse3 does not
        pass on)."""
        privileged = (self.vol.getattr(inode).mode & (stat.S_ISUID | stat.S_ISGID)
                      or self.ns.has_xattr(inode, CAPABILITY_XATTR))
        return not privileged and self.vol.direct_writes(inode)

    async def create(self, parent_inode, name, mode, flags, ctx):
        ino = await self._make(parent_inode, name, mode, ctx)
        return self._open_handle(ino, flags), self._entry(ino)

    async def open(self, inode, flags, ctx):
        if _may_write(flags):  # no page may be stored once it can be written
            await self._pages.settled(inode)
        if flags & os.O_TRUNC:  # the kernel leaves O_TRUNC to us (atomic_o_trunc)
            await self.vol.set_size(inode, 0)
        return self._open_handle(inode, flags)

    async def read(self, fh, off, size):
        return await self.vol.read(self._files[fh], off, size)

    async def write(self, fh, off, buf):
        await self.vol.write(self._files[fh], off, buf)
        return len(buf)

    async def flush(self, fh):
        await self.vol.flush_handle(self._files[fh])

    async def fsync(self, fh, datasync):
        await self.vol.fsync(self._files[fh])

    async def release(self, fh):
        handle = self._files.pop(fh)
        try:
            await self.vol.release(handle)
        finally:
            self._modes.release(fh)  # after the last writes are sealed: until then no page is stored
            self.vol.locks.closed(handle.file.ino, fh)

    # -- locks (on every node of a shared volume: aifs.vfs.locks) ------------

    async def getlk(self, inode, fh, owner, lock):
        found = self.vol.locks.conflicting(inode, owner, lock)
        return lock._replace(type=fcntl.F_UNLCK) if found is None else pyfuse3.FileLock(*found)

    async def setlk(self, inode, fh, owner, lock, sleep, interrupted):
        await self.vol.locks.posix(inode, fh, owner, lock, interrupted if sleep else None)

    async def flock(self, inode, fh, owner, op, interrupted):
        await self.vol.locks.flock(inode, fh, owner, op, interrupted)

    # -- directories -------------------------------------------------------

    async def opendir(self, inode, ctx):
        self.ns.directory(inode)
        fh = self._new_fh()
        self._dirs[fh] = DirListing(inode, self.listing_attributes)
        return opendir_reply(fh)

    async def readdir(self, fh, start_id, token):
        listing = self._dirs[fh]
        for entry in listing.entries(self.vol, start_id):
            if not entry_reply(token, entry, self.timeouts):
                listing.unsent(entry)
                return

    async def releasedir(self, fh):
        del self._dirs[fh]

    async def fsyncdir(self, fh, datasync):
        await self.vol.sync_all()


def _may_write(flags: int) -> bool:
    return flags & os.O_ACCMODE != os.O_RDONLY
