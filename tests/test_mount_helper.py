"""Mounting through mount(8): fstab lines and `mount -t fuse.aifs` run /sbin/mount.fuse.aifs
(deploy/mount.fuse.aifs), which runs `aifs mount-helper`; a plain umount flushes and ends the
mount process; a mount right after waits for that process instead of calling the volume busy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, TARGET, Volume, aifs_cli
from helpers import read_file, write_file

pytestmark = pytest.mark.skipif(TARGET == "local", reason="needs a real aifs mount")

HELPER = Path("/usr/sbin/mount.fuse.aifs")  # /sbin/mount.fuse.aifs: /sbin is /usr/sbin on Debian
CHECKOUT_AIFS = f"env PYTHONPATH={REPO} {sys.executable} -m aifs"  # the code under test, not an installed copy
TIMEOUT_S = 90


@pytest.fixture(scope="module")
def mount_helper():
    """/sbin/mount.fuse.aifs as deploy/install.sh installs it, running this checkout; a helper
    that was there before is put back afterwards."""
    before = HELPER.read_bytes() if HELPER.exists() else None
    template = (REPO / "deploy" / "mount.fuse.aifs").read_text()
    HELPER.write_text(template.replace("@AIFS@", CHECKOUT_AIFS))
    HELPER.chmod(0o755)
    yield HELPER
    if before is None:
        HELPER.unlink()
    else:
        HELPER.write_bytes(before)


@pytest.fixture
def volume(tmp_path):
    v = Volume(tmp_path)  # a config, a scratch state dir and an empty mountpoint; not mounted
    yield v
    v.close()


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=REPO,
                          stdin=subprocess.DEVNULL)


def fstab(volume: Volume, options: str) -> Path:
    path = volume.base / "fstab"
    path.write_text(f"# a scratch fstab\naifs  {volume.path}  fuse.aifs  {options}  0 0\n")
    return path


def mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) and " - fuse.aifs " in line for line in f)


def holder_pid(volume: Volume) -> int:
    return int((volume.state_dir / "lock").read_text().split()[0])


def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists(), f"mount process {pid} still runs after the unmount"


def test_fstab_line_mounts_and_plain_umount_keeps_the_data(mount_helper, volume):
    table = fstab(volume, f"_netdev,nofail,noauto,x-systemd.automount,config={volume.config}")
    done = run("mount", "--fstab", str(table), str(volume.path))
    assert done.returncode == 0, done.stderr
    assert mounted(volume.path), "mount returned before the volume was mounted"
    write_file(volume.path / "kept.bin", b"survives a plain umount" * 1000)
    os.mkdir(volume.path / "dir")
    pid = holder_pid(volume)

    done = run("umount", str(volume.path))
    assert done.returncode == 0, done.stderr
    wait_gone(pid)
    record = json.loads((volume.state_dir / "last-exit.json").read_text())
    assert record["pid"] == pid and record["finished"] and not record["error"]

    done = run("mount", "-t", "fuse.aifs", "-o", f"config={volume.config}", "aifs", str(volume.path))
    assert done.returncode == 0, done.stderr
    assert read_file(volume.path / "kept.bin") == b"survives a plain umount" * 1000
    assert (volume.path / "dir").is_dir()


def test_mount_right_after_a_plain_umount_waits_for_the_flush(mount_helper, volume):
    """A plain umount returns before the mount process has flushed and let go of the volume."""
    table = fstab(volume, f"config={volume.config}")
    for _ in range(2):
        done = run("mount", "--fstab", str(table), str(volume.path))
        assert done.returncode == 0, done.stderr
        write_file(volume.path / "again", b"x")
        assert run("umount", str(volume.path)).returncode == 0


def test_unknown_mount_option_is_refused_in_one_line(mount_helper, volume):
    done = run("mount", "--fstab", str(fstab(volume, f"config={volume.config},ro")), str(volume.path))
    assert done.returncode != 0
    line = done.stderr.strip()
    assert line.startswith("aifs: unknown mount option 'ro'; aifs understands config=FILE") and "\n" not in line
    assert not mounted(volume.path)


def test_allow_other_must_agree_with_the_config(mount_helper, volume):
    volume.config.write_text(volume.config.read_text() + "\n[fuse]\nallow_other = false\n")
    done = run("mount", "--fstab", str(fstab(volume, f"allow_other,config={volume.config}")), str(volume.path))
    assert done.returncode != 0
    assert "allow_other contradicts the config" in done.stderr and "Traceback" not in done.stderr
    assert not mounted(volume.path)


def test_mount_waits_for_a_holder_that_is_finishing_its_unmount(volume):
    """The holder took the volume for a mountpoint where nothing is mounted: it is finishing an
    unmount (or starting). The mount waits for it to exit instead of refusing."""
    hold = ("import sys, time; from pathlib import Path; from aifs.vfs.statedir import VolumeLock; "
            f"VolumeLock.acquire(Path({str(volume.state_dir)!r}), '/unmounted/elsewhere'); "
            "print('held', flush=True); time.sleep(2)")
    holder = subprocess.Popen([sys.executable, "-c", hold], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        done = aifs_cli("mount", "-c", str(volume.config), "-d", str(volume.path))
        assert done.returncode == 0, done.stderr
        assert f"waiting for process {holder.pid}, which holds the volume" in done.stderr
        assert holder.poll() is not None and mounted(volume.path)
    finally:
        holder.kill()
        holder.wait(timeout=TIMEOUT_S)
