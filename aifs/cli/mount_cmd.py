"""`aifs mount` and `aifs umount`."""

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import click

from aifs.cli.common import EXIT_USAGE, config_option, fail, load_or_exit, state_dir_option
from aifs.config import Config
from aifs.fuse.mountinfo import aifs_mount, find_mount
from aifs.rdma.transport import TransportUnavailable
from aifs.tiers.s3_marker import S3SetupError
from aifs.vfs.volume import VolumeBusy

DAEMON_ENV = "AIFS_DAEMON"
READY_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 120.0


@click.command()
@config_option
@state_dir_option
@click.option("-d", "--background", is_flag=True, help="Return once the mount answers; log to a file.")
@click.argument("mountpoint", type=click.Path(path_type=Path))
def mount(config_path: Path | None, state_dir: Path | None, background: bool, mountpoint: Path) -> None:
    """Mount the volume at MOUNTPOINT (foreground unless -d)."""
    config = load_or_exit(config_path, state_dir)
    mountpoint = mountpoint.absolute()
    _check_mountpoint(mountpoint)
    if background:
        _spawn_daemon(config, mountpoint)
        return
    _setup_logging(config, also_file=os.environ.get(DAEMON_ENV) != "1")
    from aifs.fuse.mount import serve

    try:
        serve(config, mountpoint)
    except (VolumeBusy, S3SetupError, TransportUnavailable) as e:
        fail(str(e))
    except OSError as e:  # a tier that cannot be reached or written when the volume opens
        fail(f"cannot serve the volume in {config.volume.state_dir}: {e}")


def _check_mountpoint(mountpoint: Path) -> None:
    if not mountpoint.is_dir():
        fail(f"mountpoint {mountpoint} does not exist or is not a directory; create it with mkdir -p",
             EXIT_USAGE)
    entry = find_mount(mountpoint)
    if entry is not None and entry.mountpoint == mountpoint and entry.fstype.startswith("fuse"):
        fail(f"{mountpoint} already has a {entry.fstype} mount ({entry.source}); unmount it first",
             EXIT_USAGE)


def _setup_logging(config: Config, also_file: bool) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if also_file:
        config.log_file().parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(config.log_file()))
    logging.basicConfig(
        level=config.logging.level.upper(), handlers=handlers,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _spawn_daemon(config: Config, mountpoint: Path) -> None:
    """Start the mount in its own session and wait until it answers (or report why not)."""
    log_file = config.log_file()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    args = [a for a in sys.argv[1:] if a not in ("-d", "--background")]
    with open(log_file, "ab") as log:
        log_start = log.tell()
        proc = subprocess.Popen(
            [sys.executable, "-m", "aifs", *args], stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, DAEMON_ENV: "1"},
        )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            fail(f"mount failed (exit {proc.returncode}); log {log_file}:\n{_since(log_file, log_start)}")
        if aifs_mount(mountpoint) is not None:
            os.stat(mountpoint)
            click.echo(f"aifs: mounted {config.volume.state_dir} at {mountpoint} "
                       f"(pid {proc.pid}, log {log_file})")
            return
        time.sleep(0.05)
    proc.terminate()
    fail(f"mount did not answer within {READY_TIMEOUT_S:.0f} s; see {log_file}")


def _since(path: Path, offset: int) -> str:
    """What the failed daemon wrote to its log."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace").strip()


@click.command()
@click.argument("mountpoint", type=click.Path(path_type=Path))
def umount(mountpoint: Path) -> None:
    """Flush everything and unmount MOUNTPOINT; waits for the mount process to finish."""
    mountpoint = mountpoint.absolute()
    entry = aifs_mount(mountpoint)
    if entry is None:
        fail(f"{mountpoint} is not an aifs mount", EXIT_USAGE)
    pid = _daemon_pid(entry.state_dir)
    result = subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True, text=True)
    if result.returncode != 0:
        fail(f"cannot unmount {mountpoint}: {result.stderr.strip()}")
    if pid is not None and not _wait_exit(pid):
        fail(f"unmounted, but the mount process {pid} did not finish within {EXIT_TIMEOUT_S:.0f} s")
    click.echo(f"aifs: unmounted {mountpoint}")


def _daemon_pid(state_dir: Path | None) -> int | None:
    try:
        return int((state_dir / "lock").read_text().strip())
    except (OSError, ValueError, TypeError):
        return None


def _wait_exit(pid: int) -> bool:
    deadline = time.monotonic() + EXIT_TIMEOUT_S
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or _is_zombie(pid):
            return True
        time.sleep(0.05)
    return False


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True
