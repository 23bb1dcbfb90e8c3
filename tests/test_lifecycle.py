"""The life of a mount from the command line: clear refusals, signals, status with no mount."""

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import TARGET, aifs_cli

pytestmark = pytest.mark.skipif(TARGET == "local", reason="needs a real aifs mount")


def test_missing_mountpoint_is_refused_with_a_clear_message(vol, tmp_path):
    cp = aifs_cli("mount", "-c", str(vol.config), "-d", str(tmp_path / "nowhere"))
    assert cp.returncode == 2
    assert "does not exist" in cp.stderr and "mkdir" in cp.stderr


def test_second_mount_of_one_volume_is_refused_without_a_word_in_the_first_ones_log(vol, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    log = vol.state_dir / "aifs.log"
    before = log.read_bytes()
    cp = aifs_cli("mount", "-c", str(vol.config), "-d", str(other))
    assert cp.returncode == 1
    assert f"cannot mount at {other}" in cp.stderr and f"is mounted at {vol.path} by process" in cp.stderr
    assert log.read_bytes() == before
    assert os.listdir(vol.path) is not None


def test_bad_config_stops_the_mount_before_anything_happens(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('[volume]\nblock_size = "3MiB"\n')
    cp = aifs_cli("mount", "-c", str(config), "-d", str(tmp_path))
    assert cp.returncode == 2
    assert "volume.block_size" in cp.stderr and "3MiB" in cp.stderr


def test_buffered_reads_get_the_configured_read_ahead(vol):
    """The kernel takes the mount's read-ahead from the answer to FUSE INIT: the value
    (1 MiB by default) must be set after that, or sequential reads come in 128 KiB."""
    st = os.stat(vol.path)
    knob = f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/read_ahead_kb"
    deadline = time.monotonic() + 10
    while (value := open(knob).read().strip()) != "1024" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert value == "1024"


THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def heap_flags(volume) -> list[str]:
    """The VmFlags of the daemon's heap: `hg` when it is madvised for transparent huge pages."""
    [pid] = volume.daemon_pids()
    mapping = None
    for line in open(f"/proc/{pid}/smaps"):
        if not line[0].isupper():
            mapping = line.split()[-1]
        elif line.startswith("VmFlags:") and mapping == "[heap]":
            return line.split()[1:]
    raise AssertionError(f"process {pid} has no heap")


@pytest.mark.skipif(not os.path.exists(THP) or "[never]" in open(THP).read(),
                    reason="this kernel has no transparent huge pages")
def test_the_mount_heap_lies_in_huge_pages_unless_told_otherwise(make_volume, monkeypatch):
    """glibc reads its tunables when a program starts: `aifs mount` starts itself again with
    glibc.malloc.hugetlb=1 added to what the caller set, and an operator's own value stands."""
    volume = make_volume("huge-heap")
    assert "hg" in heap_flags(volume)
    volume.umount()
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=8")
    volume.mount()
    assert "hg" in heap_flags(volume)
    volume.umount()
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=0")
    volume.mount()
    assert "hg" not in heap_flags(volume)


def test_umount_of_a_plain_directory_is_refused(tmp_path):
    cp = aifs_cli("umount", str(tmp_path))
    assert cp.returncode == 2
    assert "is not an aifs mount" in cp.stderr


def test_status_without_a_mount_says_so(tmp_path):
    cp = aifs_cli("status", str(tmp_path))
    assert cp.returncode == 1
    assert "not on an aifs mount" in cp.stderr


_WRITER = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"kept by SIGTERM " * 4096)
print("written", flush=True)
time.sleep(60)
"""


def test_sigterm_flushes_open_files_and_unmounts(make_volume):
    """A writer still holds its file open (no fsync, no close) when the mount is told to stop."""
    vol = make_volume("sigterm")
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(vol.path / "open.bin")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "written"
        (daemon,) = vol.daemon_pids()
        os.kill(daemon, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while vol.daemon_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not vol.daemon_pids(), "the mount did not stop on SIGTERM"
    finally:
        writer.kill()
        writer.wait()
    subprocess.run(["fusermount3", "-u", "-z", str(vol.path)], capture_output=True)
    vol.mount()
    assert (vol.path / "open.bin").read_bytes() == b"kept by SIGTERM " * 4096
    vol.umount()
