"""A new user's first steps, and the mistakes they make: what is installed where, what the mount
refuses and how it says so (one sentence, nothing created or logged in vain), and what df
and config check tell them."""

import errno
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import REPO, TARGET, Volume, aifs_cli

pytestmark = pytest.mark.skipif(TARGET == "local", reason="needs a real aifs mount")

NOBODY = 65534
MiB = 1 << 20


def one_line(cp: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in cp.stderr, cp.stderr
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1, cp.stderr
    return lines[0]


def as_nobody(*args: str) -> subprocess.CompletedProcess:
    """`python -m aifs ARGS` as an unprivileged user, from a directory that user may enter."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "HOME": "/nonexistent"}
    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                           sys.executable, "-m", "aifs", *args], cwd="/", env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A scratch directory every user may write into (pytest's own are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="aifs-first-"))
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fresh(tmp_path) -> Iterator[Volume]:
    """A volume of this test's own, not mounted yet."""
    volume = Volume(tmp_path / "vol")
    yield volume
    volume.close()


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """`path` on a read-only bind mount of itself, as a read-only disk would be."""
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


def mounted_saying(volume: Volume) -> str:
    """Mount in the background, which must succeed; what it said on stderr."""
    cp = aifs_cli("mount", "-c", str(volume.config), "-d", str(volume.path))
    assert cp.returncode == 0, cp
    return cp.stderr


def add_to_config(volume: Volume, table: str, line: str) -> None:
    text = volume.config.read_text()
    volume.config.write_text(text.replace(f"[{table}]\n", f"[{table}]\n{line}\n", 1) if f"[{table}]" in text
                             else text + f"\n[{table}]\n{line}\n")


# -- the install ---------------------------------------------------------------------------------


def test_aifs_is_installed_as_a_copy_in_its_own_environment_of_debians_python():
    command = shutil.which("aifs")
    assert command is not None, "deploy/install.sh puts aifs on the PATH"
    venv = Path(os.path.realpath(command)).parents[1]
    config = dict(line.split(" = ", 1) for line in (venv / "pyvenv.cfg").read_text().splitlines() if " = " in line)
    assert config["home"] == "/usr/bin", "the environment is made with Debian's /usr/bin/python3"
    probe = subprocess.run([str(venv / "bin/python"), "-c", "import aifs; print(aifs.__file__)"], cwd="/",
                           env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True)
    installed = Path(probe.stdout.strip())
    assert installed.is_relative_to(venv) and not installed.is_relative_to(REPO), installed
    version = subprocess.run([command, "--version"], cwd="/", env={"PATH": "/usr/bin:/bin"},
                             capture_output=True, text=True, check=True)
    assert version.stdout.startswith("aifs ")


# -- refusals before anything is created -----------------------------------------------------------


@contextmanager
def private_fuse_device() -> Iterator[None]:
    """/dev/fuse open to root only for a moment, as many machines keep it (Debian's fuse3 opens it
    to all when it is installed); mounts made earlier keep their descriptors."""
    mode = stat.S_IMODE(os.stat("/dev/fuse").st_mode)
    os.chmod("/dev/fuse", 0o600)
    try:
        yield
    finally:
        os.chmod("/dev/fuse", mode)


def test_a_user_who_cannot_open_dev_fuse_is_told_so_and_nothing_is_created(open_dir):
    (open_dir / "mnt").mkdir()
    with private_fuse_device():
        cp = as_nobody("mount", "--state-dir", str(open_dir / "state"), "-d", str(open_dir / "mnt"))
    assert cp.returncode == 2
    assert "cannot open /dev/fuse: permission denied" in one_line(cp)
    assert not (open_dir / "state").exists()


def test_a_read_only_state_directory_is_refused_in_one_sentence(fresh):
    with read_only(fresh.state_dir):
        cp = aifs_cli("mount", "-c", str(fresh.config), "-d", str(fresh.path))
    assert cp.returncode == 2
    assert f"cannot use the state directory {fresh.state_dir}" in one_line(cp)
    assert "--state-dir" in cp.stderr


def test_fsck_reads_a_read_only_volume_and_refuses_to_repair_it(fresh):
    fresh.mount()
    (fresh.path / "f").write_bytes(b"data")
    fresh.umount()
    with read_only(fresh.state_dir):
        check = aifs_cli("fsck", "-c", str(fresh.config))
        repair = aifs_cli("fsck", "-c", str(fresh.config), "--repair")
    assert check.returncode == 0, check
    assert "clean" in check.stdout
    assert repair.returncode == 2
    assert "not writable" in one_line(repair)


def test_umount_by_another_user_says_whose_mount_it_is(vol):
    cp = as_nobody("umount", str(vol.path))
    assert cp.returncode == 2
    assert "was mounted by uid 0; only that user or root may unmount it" in one_line(cp)
    assert vol.healthy()


def test_metrics_address_in_use_stops_the_mount_with_one_line(fresh):
    os.chmod(fresh.state_dir, 0o700)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        add_to_config(fresh, "metrics", f'listen = "{address}"')
        foreground = aifs_cli("mount", "-c", str(fresh.config), str(fresh.path))
        background = aifs_cli("mount", "-c", str(fresh.config), "-d", str(fresh.path))
    assert foreground.returncode == 1
    assert f"cannot serve metrics on {address}" in one_line(foreground)
    assert background.returncode == 1 and "Traceback" not in background.stderr
    assert f"cannot serve metrics on {address}" in background.stderr
    assert not fresh.healthy()


def test_a_non_empty_mountpoint_is_refused_unless_asked(fresh):
    (fresh.path / "kept.txt").write_text("under the mount")
    cp = aifs_cli("mount", "-c", str(fresh.config), "-d", str(fresh.path))
    assert cp.returncode == 2
    assert "is not empty" in one_line(cp) and "--nonempty" in cp.stderr
    cp = aifs_cli("mount", "-c", str(fresh.config), "-d", "--nonempty", str(fresh.path))
    assert cp.returncode == 0, cp
    assert not (fresh.path / "kept.txt").exists()
    fresh.umount()
    assert (fresh.path / "kept.txt").read_text() == "under the mount"
    (fresh.path / "kept.txt").unlink()


def test_a_mount_over_another_file_system_is_the_one_commands_reach(fresh):
    """The last of the mounts stacked at one point is the one its paths are on."""
    subprocess.run(["mount", "-t", "tmpfs", "below", str(fresh.path)], check=True)
    try:
        cp = aifs_cli("mount", "-c", str(fresh.config), "-d", "--nonempty", str(fresh.path))
        assert cp.returncode == 0, cp
        status = aifs_cli("status", "--json", str(fresh.path))
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["tiers"]
        assert aifs_cli("umount", str(fresh.path)).returncode == 0
    finally:
        subprocess.run(["umount", str(fresh.path)], check=True)


# -- told, not silently accepted ---------------------------------------------------------------------


def test_the_state_directory_is_private(fresh, tmp_path):
    os.chmod(fresh.state_dir, 0o755)
    said = mounted_saying(fresh)
    assert stat.S_IMODE(fresh.state_dir.stat().st_mode) == 0o700
    assert f"state directory {fresh.state_dir} was open to other users (mode 755); made it 700" in said
    fresh.umount()
    new = tmp_path / "new-state"
    cp = aifs_cli("mount", "-c", str(fresh.config), "--state-dir", str(new), "-d", str(fresh.path))
    assert cp.returncode == 0, cp
    assert stat.S_IMODE(new.stat().st_mode) == 0o700
    fresh.umount()


def test_capacities_beyond_the_machine_are_warned_about(fresh):
    text = fresh.config.read_text().replace('capacity = "256MiB"', 'capacity = "1000TiB"')
    fresh.config.write_text(text.replace('capacity = "4GiB"', 'capacity = "100PiB"'))
    check = aifs_cli("config", "check", str(fresh.config))
    assert check.returncode == 0
    assert "(ram) capacity 1000.0 TiB is more than this machine's memory" in check.stderr
    assert "(nvme) capacity 100.0 PiB is more than the file system holding" in check.stderr
    assert "capacity 1000.0 TiB is more than this machine's memory" in mounted_saying(fresh)
    fresh.umount()


def test_a_block_size_unlike_the_volumes_is_said_on_the_command_line(fresh):
    fresh.mount()
    fresh.umount()
    add_to_config(fresh, "volume", 'block_size = "1MiB"')
    said = mounted_saying(fresh)
    assert "volume.block_size = 1048576 in the config, but this volume was formatted with 4194304" in said
    fresh.umount()


def test_df_shows_the_volumes_own_data_and_its_configured_capacity(fresh):
    fresh.mount()
    (fresh.path / "six").write_bytes(b"6bytes")
    st = os.statvfs(fresh.path)
    assert (st.f_blocks - st.f_bfree) * st.f_frsize < MiB, "df counts the volume's data, not the host disk's"
    fresh.umount()

    add_to_config(fresh, "volume", 'capacity = "16MiB"')
    fresh.mount()
    st = os.statvfs(fresh.path)
    assert st.f_blocks * st.f_frsize == 16 * MiB
    with pytest.raises(OSError) as full:
        with open(fresh.path / "big", "wb") as f:
            for _ in range(20):
                f.write(os.urandom(MiB))
    assert full.value.errno == errno.ENOSPC
    with open(fresh.path / "six", "r+b") as f:  # rewriting what is there still works
        f.write(b"SIX")
    assert (fresh.path / "six").read_bytes() == b"SIXtes"
    fresh.umount()
