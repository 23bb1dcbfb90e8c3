"""A volume's state directory (metadata, NVMe staging, log) and the lock that gives it to one
process at a time: a mount, fsck or gc.

The directory holds file names and extended attributes in the clear (the RocksDB files), so
it is private to its owner: created 0700, and an existing one loses any access by other
users. The lock file names its holder (pid and what it does, e.g. the mountpoint), so a
refused mount or fsck can say who has the volume.
"""

import errno
import fcntl
import os
import stat
from dataclasses import dataclass
from pathlib import Path

LOCK_NAME = "lock"
HOLDER_BYTES = 4096  # the lock file's fixed size: room for a pid and a mountpoint of up to PATH_MAX


class VolumeBusy(Exception):
    """Another process has this volume's state directory."""


class StateDirError(Exception):
    """The state directory cannot be used (not writable, not a directory); the message says what to do."""


@dataclass(frozen=True)
class Holder:
    """Who holds a volume: a pid, and its mountpoint (or another purpose, like fsck)."""

    pid: int | None
    purpose: str

    @classmethod
    def parse(cls, text: str) -> "Holder":
        pid, _, purpose = text.strip().partition("\n")
        return cls(int(pid) if pid.strip().isdigit() else None, purpose.strip())

    def describe(self) -> str:
        who = f"process {self.pid}" if self.pid is not None else "another process"
        if self.purpose.startswith("/"):
            return f"mounted at {self.purpose} by {who}"
        return f"in use by {who}" + (f" ({self.purpose})" if self.purpose else "")


def prepare_state_dir(state_dir: Path) -> str | None:
    """Create the state directory private to its owner, or make an existing one so; returns a
    sentence for the user when it took access away. Raises StateDirError when the directory
    cannot be written (a read-only file system, wrong permissions)."""
    try:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        mode = stat.S_IMODE(state_dir.stat().st_mode)
        if not os.access(state_dir, os.W_OK | os.X_OK):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
        if mode & 0o077:
            os.chmod(state_dir, mode & ~0o077)
            return (f"state directory {state_dir} was open to other users (mode {mode:o}); "
                    f"made it {mode & ~0o077:o}, as it holds file names and attributes")
    except OSError as e:
        raise StateDirError(_unusable(state_dir, e)) from None
    return None


def _unusable(state_dir: Path, error: OSError) -> str:
    return (f"cannot use the state directory {state_dir}: {error.strerror or error}; "
            "choose a writable directory with --state-dir or volume.state_dir")


class VolumeLock:
    """An exclusive flock on STATE_DIR/lock, held until closed (or the process ends)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def acquire(cls, state_dir: Path, purpose: str, read_only: bool = False) -> "VolumeLock":
        """Lock the volume for `purpose` (a mountpoint, or a word like "fsck"); raise VolumeBusy
        naming the holder. A read-only lock writes nothing (fsck without --repair): it only
        needs the lock file to exist, which it does once the volume was ever mounted."""
        path = state_dir / LOCK_NAME
        try:
            fd = os.open(path, os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:
            return cls(-1)  # never mounted: nobody to exclude, and nothing may be created
        except OSError as e:
            raise StateDirError(_unusable(state_dir, e)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = Holder.parse(os.pread(fd, 4096, 0).decode(errors="replace"))
            os.close(fd)
            raise VolumeBusy(f"the volume in {state_dir} is {holder.describe()}") from None
        if not read_only:  # in place, padded: a full disk cannot keep the holder from being named
            os.pwrite(fd, f"{os.getpid()}\n{purpose}\n".encode().ljust(HOLDER_BYTES), 0)
        return cls(fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def read_holder(state_dir: Path) -> Holder | None:
    """Who took the volume last (whether or not it still holds it), from its lock file."""
    try:
        return Holder.parse((state_dir / LOCK_NAME).read_text(errors="replace"))
    except OSError:
        return None


NODE_ID_NAME = "node-id"


def known_node_id(state_dir: Path) -> str:
    """The node id a mount of this state directory made, or "" if it never made one (a state
    directory never mounted on a shared volume staged nothing there); reads only."""
    try:
        return (state_dir / NODE_ID_NAME).read_text().strip()
    except FileNotFoundError:
        return ""


def node_id(state_dir: Path) -> str:
    """This node's name in a shared volume's records (the uploads it stages): made once per
    state directory, so a node that restarts finds its own staged blocks again."""
    known = known_node_id(state_dir)
    if known:
        return known
    path = state_dir / NODE_ID_NAME
    made = os.urandom(6).hex()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(made + "\n")
    os.replace(tmp, path)
    return made
