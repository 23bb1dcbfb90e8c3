"""`aifs mount` and `aifs umount`.

Everything that can refuse a mount is checked before anything is created or logged: the
config, the mountpoint, access to /dev/fuse, the state directory and the volume lock. So a
refused mount leaves no new volume behind and writes nothing into the log of the mount that
holds the volume.
"""

import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import click

from aifs.cli.common import EXIT_USAGE, config_option, fail, load_or_exit, state_dir_option
from aifs.cli.logsetup import setup_logging
from aifs.cli.sdnotify import notify_ready_when_mounted
from aifs.config import Config, machine_warnings
from aifs.units import size
from aifs.fuse.heap import exec_with_huge_pages
from aifs.fuse.mountinfo import MountEntry, aifs_mount, find_mount
from aifs.fuse.preflight import MountRefused, check_fuse_device
from aifs.vfs.exitrecord import ExitRecord
from aifs.vfs.statedir import StateDirError, VolumeBusy, VolumeLock, prepare_state_dir, read_holder

DAEMON_ENV = "AIFS_DAEMON"
READY_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 120.0
_BACKGROUND_FLAGS = ("-d", "--background")


@click.command()
@config_option
@state_dir_option
@click.option("-d", "--background", is_flag=True, help="Return once the mount answers; log to a file.")
@click.option("--nonempty", is_flag=True, help="Mount over a directory that is not empty (hiding what it holds).")
@click.option("--accept-missing-marker", is_flag=True,
              help="Mount although the bucket has no volume marker while the metadata refers to data "
                   "there (an emptied or replaced bucket); a new marker is written.")
@click.argument("mountpoint", type=click.Path(path_type=Path))
def mount(config_path: Path | None, state_dir: Path | None, background: bool, nonempty: bool,
          accept_missing_marker: bool, mountpoint: Path) -> None:
    """Mount the volume at MOUNTPOINT (foreground unless -d)."""
    exec_with_huge_pages()  # before anything is opened: descriptors do not survive it
    config = load_or_exit(config_path, state_dir)
    mountpoint = mountpoint.absolute()
    _check_mountpoint(mountpoint, nonempty)
    lock = _take_volume(config, mountpoint)
    if background:
        lock.close()  # the daemon takes it again
        _spawn_daemon(config, mountpoint)
        return
    setup_logging(config, background=os.environ.get(DAEMON_ENV) == "1")
    notify_ready_when_mounted(mountpoint)
    for warning in machine_warnings(config):
        logging.getLogger("aifs.config").warning("%s", warning)
    from aifs.fuse.mount import serve

    try:
        serve(config, mountpoint, lock, accept_missing_marker)
    except MountRefused as e:
        fail(str(e))
    except OSError as e:  # a tier that cannot be reached or written when the volume opens
        fail(f"cannot serve the volume in {config.volume.state_dir}: {e}")


def _check_mountpoint(mountpoint: Path, nonempty: bool) -> None:
    if not mountpoint.is_dir():
        fail(f"mountpoint {mountpoint} does not exist or is not a directory; create it with mkdir -p",
             EXIT_USAGE)
    entry = find_mount(mountpoint)
    if entry is not None and entry.mountpoint == mountpoint and entry.fstype.startswith("fuse"):
        fail(f"{mountpoint} already has a {entry.fstype} mount ({entry.source}); unmount it first",
             EXIT_USAGE)
    if not nonempty and any(os.scandir(mountpoint)):
        fail(f"mountpoint {mountpoint} is not empty: the mount would hide what it holds; "
             "use an empty directory, or pass --nonempty to mount over it anyway", EXIT_USAGE)


def _take_volume(config: Config, mountpoint: Path) -> VolumeLock:
    """Check that the mount can happen, then create the state directory and lock the volume."""
    try:
        check_fuse_device()
        tightened = prepare_state_dir(config.volume.state_dir)
        lock = _lock_volume(config.volume.state_dir, mountpoint)
    except (MountRefused, StateDirError) as e:
        fail(str(e), EXIT_USAGE)
    except VolumeBusy as e:
        fail(f"cannot mount at {mountpoint}: {e}; unmount it first (aifs umount MOUNTPOINT)")
    if tightened:
        click.echo(f"aifs: warning: {tightened}", err=True)
    return lock


def _lock_volume(state_dir: Path, mountpoint: Path) -> VolumeLock:
    """Lock the volume. A mount process that holds it without being mounted is finishing an
    unmount (a plain umount returns before the process has flushed) or still starting: wait
    until it exits, or mounts after all (busy then)."""
    try:
        return VolumeLock.acquire(state_dir, str(mountpoint))
    except VolumeBusy:
        holder = read_holder(state_dir)
        if holder is None or holder.pid is None or not holder.purpose.startswith("/"):
            raise
        held_at = Path(holder.purpose)
        if aifs_mount(held_at) is not None:
            raise
        click.echo(f"aifs: waiting for process {holder.pid}, which holds the volume, to finish "
                   f"its unmount of {held_at}", err=True)
        if not _wait_exit(holder.pid, give_up=lambda: aifs_mount(held_at) is not None):
            raise
        return VolumeLock.acquire(state_dir, str(mountpoint))


def _spawn_daemon(config: Config, mountpoint: Path) -> None:
    """Start the mount in its own session and wait until it answers (or report why not);
    what it warned about while starting is repeated here, on the command line."""
    log_file = config.log_file()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    args = [a for a in sys.argv[1:] if a not in _BACKGROUND_FLAGS]
    with open(log_file, "a+b") as log:  # read back too: see _since
        log_start = log.tell()
        proc = subprocess.Popen(
            [sys.executable, "-m", "aifs", *args], stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, DAEMON_ENV: "1"},
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                fail(f"mount failed (exit {proc.returncode}); log {log_file}:\n{_since(log, log_start)}")
            if aifs_mount(mountpoint) is not None:
                os.stat(mountpoint)
                for line in _since(log, log_start).splitlines():
                    if " WARNING " in line:
                        click.echo(f"aifs: warning: {line.split(': ', 1)[-1]}", err=True)
                click.echo(f"aifs: mounted {config.volume.state_dir} at {mountpoint} "
                           f"(pid {proc.pid}, log {log_file})")
                return
            time.sleep(0.05)
    proc.terminate()
    fail(f"mount did not answer within {READY_TIMEOUT_S:.0f} s; see {log_file}")


def _since(log: BinaryIO, offset: int) -> str:
    """What the daemon wrote to its log since `offset`. Read through `log`, the file the daemon
    was started with: when the log rotated meanwhile, that is now FILE.1, and the rest is in FILE."""
    started_with = os.fstat(log.fileno())
    text = os.pread(log.fileno(), max(0, started_with.st_size - offset), offset)
    try:
        with open(log.name, "rb") as current:
            if os.fstat(current.fileno()).st_ino != started_with.st_ino:
                text += current.read()
    except OSError:
        pass  # rotated and not yet created again: nothing was written there
    return text.decode(errors="replace").strip()


@click.command()
@click.argument("mountpoint")  # a plain string: click.Path would stat it, which hangs on a stuck mount
def umount(mountpoint: str) -> None:
    """Flush everything and unmount MOUNTPOINT; waits for the mount process to finish, and
    says what it left waiting for the durable tier."""
    mountpoint = Path(os.path.abspath(mountpoint))
    entry = aifs_mount(mountpoint)
    if entry is None:
        fail(f"{mountpoint} is not an aifs mount", EXIT_USAGE)
    _check_owner(entry)
    holder = read_holder(entry.state_dir) if entry.state_dir is not None else None
    result = subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True, text=True)
    if result.returncode != 0:
        fail(f"cannot unmount {mountpoint}: {_why_busy(result.stderr.strip())}")
    pid = holder.pid if holder is not None else None
    if pid is None:
        click.echo(f"aifs: unmounted {mountpoint}")
        return
    if not _wait_exit(pid):
        fail(f"unmounted, but the mount process {pid} did not finish within {EXIT_TIMEOUT_S:.0f} s")
    _report_exit(mountpoint, entry.state_dir, pid)


def _check_owner(entry: MountEntry) -> None:
    """fusermount3 run by another user only says the entry is not in /etc/mtab: say why."""
    uid = os.geteuid()
    if uid != 0 and entry.owner_uid is not None and entry.owner_uid != uid:
        fail(f"{entry.mountpoint} was mounted by uid {entry.owner_uid}; only that user or root "
             "may unmount it", EXIT_USAGE)


def _why_busy(message: str) -> str:
    if "busy" in message.lower():
        return f"{message}; files are open or a process works in it (see: fuser -vm MOUNTPOINT)"
    return message


def _report_exit(mountpoint: Path, state_dir: Path, pid: int) -> None:
    """Success only when the mount process says its unmount finished; then what it left pending."""
    record = ExitRecord.read(state_dir, pid)
    if record is None or not record.finished:
        why = record.error if record is not None and record.error else "it ended without finishing"
        fail(f"unmounted {mountpoint}, but the mount process {pid} failed while flushing: {why}; "
             f"see its log, then check the volume with aifs fsck")
    click.echo(f"aifs: unmounted {mountpoint}")
    if record.pending_blocks:
        click.echo(f"aifs: {record.pending_blocks} blocks ({size(record.pending_bytes)}) were not yet in "
                   f"the durable tier {record.durable_tier}; they stay staged on NVMe and upload on the "
                   "next mount of this volume")


def _wait_exit(pid: int, give_up: Callable[[], bool] = lambda: False) -> bool:
    deadline = time.monotonic() + EXIT_TIMEOUT_S
    while time.monotonic() < deadline and not give_up():
        if not Path(f"/proc/{pid}").exists() or _is_zombie(pid):
            return True
        time.sleep(0.05)
    return False


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True
