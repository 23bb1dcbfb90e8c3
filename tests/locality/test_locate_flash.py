"""`aifs locate` on a volume with a flash tier: the bytes the flash servers hold are reported as
theirs, as the servers themselves count them, beside this node's tiers and the durable tier."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import aifs_cli
from flash.servers import ServerProcess, new_secret_file
from flash.test_mount_remote import remote_volume, server_objects
from s3.helpers_mount import wait_for

pytestmark = pytest.mark.timeout_s(120)

MiB = 1 << 20


def test_the_flash_servers_share_is_what_they_hold(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "flash", secret_file=new_secret_file(tmp_path / "flash.secret")).start()
    volume = remote_volume(tmp_path / "vol", [server], placement="")
    try:
        volume.mount()
        (volume.path / "data").mkdir()
        (volume.path / "data" / "big").write_bytes(b"F" * (3 * MiB + 100))
        (volume.path / "data" / "small").write_bytes(b"f" * 1000)
        assert aifs_cli("sync", "--wait", str(volume.path)).returncode == 0
        wait_for(lambda: server_objects([server.address], server.secret) == 5,
                 "the uploaded blocks to be offered to the flash server")
        cp = aifs_cli("locate", "--json", str(volume.path / "data"), timeout=60)
        assert cp.returncode == 0, cp.stderr
        found = json.loads(cp.stdout)[0]
        total = 3 * MiB + 100 + 1000
        assert (found["bytes"], found["flash"], found["durable"], found["durable_tier"], found["unknown"]) == (
            total, total, total, "objstore", {})
        assert "flash servers" in aifs_cli("locate", str(volume.path / "data"), timeout=60).stdout
    finally:
        volume.close()
        server.kill()
