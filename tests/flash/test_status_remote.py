"""`aifs status` of a mount with a remote flash tier says which flash server is down, and
for how long, in text and JSON, once the mount's reads have found it dead."""

import json
import os

from conftest import Volume, aifs_cli

from flash.test_mount_remote import BLOCK, remote_volume, remount_with_nvme_wiped, wait_until

DOWN_TIMEOUT_S = 60.0


def status_json(volume: Volume) -> dict:
    cp = aifs_cli("status", "--json", str(volume.path))
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout)


def test_a_dead_flash_server_shows_in_status(tmp_path, flash_servers):
    servers = flash_servers(2)
    addresses = [s.address for s in servers]
    volume = remote_volume(tmp_path / "vol", servers)
    data = os.urandom(16 * BLOCK)
    try:
        volume.mount()
        (volume.path / "data.bin").write_bytes(data)
        assert aifs_cli("sync", "--wait", str(volume.path)).returncode == 0
        remote = status_json(volume)["tiers"]["remote"]
        assert remote["up"] and all(s["up"] for s in remote["servers"]), remote

        servers[0].kill()
        remount_with_nvme_wiped(volume)

        assert (volume.path / "data.bin").read_bytes() == data  # reads that meet the dead server

        def dead_is_down() -> bool:
            servers_up = {s["server"]: s["up"] for s in status_json(volume)["tiers"]["remote"]["servers"]}
            return not servers_up[addresses[0]]

        wait_until(dead_is_down, DOWN_TIMEOUT_S, f"the mount marks {addresses[0]} down")
        remote = status_json(volume)["tiers"]["remote"]
        assert remote["up"] is True, remote  # one server still answers
        dead = next(s for s in remote["servers"] if s["server"] == addresses[0])
        assert dead["down_for_s"] is not None and dead["down_for_s"] >= 0, dead
        assert dead["breaker"] in ("open", "half-open") and dead["last_error"], dead
        cp = aifs_cli("status", str(volume.path))
        assert cp.returncode == 0, cp.stderr
        assert f"1 of 2 flash servers up; {addresses[0]} down for" in cp.stdout, cp.stdout
        assert "(circuit breaker " in cp.stdout and "; last error: " in cp.stdout, cp.stdout
    finally:
        volume.close()
