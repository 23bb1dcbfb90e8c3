"""The systemd units of deploy/systemd, and the readiness they rely on: a mount and a flash
server of Type=notify say READY=1 (sd_notify) once they serve."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, TARGET, Volume, aifs_cli
from flash.servers import ServerProcess, child_env

UNITS = sorted((REPO / "deploy" / "systemd").glob("*@.service"))
INSTALLED_AIFS = Path(sys.executable).with_name("aifs")  # what install.sh puts for @AIFS@
TIMEOUT_S = 60


def rendered_units(into: Path) -> list[Path]:
    """The units as deploy/install.sh installs them: @AIFS@ replaced by the installed command."""
    paths = []
    for unit in UNITS:
        path = into / unit.name
        path.write_text(unit.read_text().replace("@AIFS@", str(INSTALLED_AIFS)))
        paths.append(path)
    return paths


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_units_pass_systemd_analyze_verify(tmp_path):
    assert [u.name for u in UNITS] == ["aifs-flash@.service", "aifs@.service"]
    instances = [str(path).replace("@.service", "@train.service") for path in rendered_units(tmp_path)]
    done = subprocess.run(["systemd-analyze", "verify", *instances], capture_output=True, text=True,
                          timeout=TIMEOUT_S, cwd=tmp_path)
    assert done.returncode == 0 and not done.stdout + done.stderr, done.stdout + done.stderr


@pytest.fixture
def notify_socket(tmp_path, monkeypatch):
    """A datagram socket standing in for systemd's; NOTIFY_SOCKET names it to the children."""
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(TIMEOUT_S)
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        yield sock


@pytest.mark.skipif(TARGET == "local", reason="needs a real aifs mount")
def test_foreground_mount_notifies_ready_once_it_answers(tmp_path, notify_socket):
    volume = Volume(tmp_path)
    env = {**child_env(), "NOTIFY_SOCKET": os.environ["NOTIFY_SOCKET"]}
    with open(tmp_path / "mount.out", "wb") as out:
        mount = subprocess.Popen([sys.executable, "-m", "aifs", "mount", "-c", str(volume.config), str(volume.path)],
                                 cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        assert notify_socket.recv(4096) == b"READY=1", (tmp_path / "mount.out").read_text()
        (volume.path / "ready").write_text("the mount serves")
        assert aifs_cli("umount", str(volume.path)).returncode == 0
        assert mount.wait(timeout=TIMEOUT_S) == 0
    finally:
        mount.kill()
        mount.wait(timeout=TIMEOUT_S)
        volume.close()


def test_flash_server_notifies_ready_once_it_accepts_clients(tmp_path, notify_socket):
    server = ServerProcess(tmp_path / "flash").start()
    try:
        assert notify_socket.recv(4096) == b"READY=1"
        with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT_S):
            pass
    finally:
        server.stop()
