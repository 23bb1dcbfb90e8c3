"""The data socket itself: where it is ([fuse] bypass_socket), a path that cannot be served
refusing the mount in one line, the bypass turned off, and requests a mount must survive."""

from __future__ import annotations

import errno
import os
import socket
import struct

import msgpack
import pytest

from conftest import aifs_cli  # tests/conftest.py

from aifs.bypass.protocol import VERSION, XATTR
from aifs.client import Client

from .conftest import through_mount


def _socket_of(volume) -> str:
    return os.fsdecode(os.getxattr(volume.path, XATTR))


def test_a_socket_path_that_cannot_be_served_refuses_the_mount_in_one_line(new_volume):
    volume = new_volume('bypass_socket = "/nonexistent-aifs-dir/data.sock"')
    os.chmod(volume.state_dir, 0o700)
    cp = aifs_cli("mount", "-c", str(volume.config), str(volume.path))
    assert cp.returncode == 1
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in cp.stderr, cp.stderr
    assert "cannot serve reads without FUSE at /nonexistent-aifs-dir/data.sock" in lines[0]
    assert "[fuse] bypass_socket" in lines[0]
    assert not volume.healthy()


def test_a_socket_at_a_path_of_the_configs_choosing(new_volume, tmp_path):
    path = tmp_path / "data.sock"
    volume = new_volume(f'bypass_socket = "{path}"')
    volume.mount()
    assert _socket_of(volume) == str(path)
    assert (path.stat().st_mode & 0o777) == 0o666  # every user may ask; each request is checked
    (volume.path / "f").write_bytes(b"through the socket")
    client = Client()
    assert client.read(volume.path / "f") == b"through the socket"
    assert client.counts.bypass == 1
    volume.umount()
    assert not path.exists()


def test_with_the_socket_off_files_are_read_through_the_mount(new_volume):
    volume = new_volume('bypass_socket = "off"')
    volume.mount()
    with pytest.raises(OSError) as raised:
        _socket_of(volume)
    assert raised.value.errno == errno.ENODATA
    (volume.path / "f").write_bytes(b"through the mount")
    client = Client()
    assert client.read(volume.path / "f") == b"through the mount"
    assert (client.counts.bypass, client.counts.mount) == (0, 1)


def _exchange(path: str, payload: bytes, announced: int | None = None) -> dict:
    """The reply to `payload`, framed with its length (or with the `announced` one)."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(path)
        sock.sendall(struct.pack(">I", len(payload) if announced is None else announced) + payload)
        length = struct.unpack(">I", sock.recv(4, socket.MSG_WAITALL))[0]
        return msgpack.unpackb(sock.recv(length, socket.MSG_WAITALL))


def test_bad_requests_get_a_reason_and_the_mount_serves_on(bvol):
    path = _socket_of(bvol)
    (bvol.path / "after-bad-requests").write_bytes(b"still served")
    assert "msgpack" in _exchange(path, b"\xc1 not msgpack")["error"]
    assert "paths" in _exchange(path, msgpack.packb({"v": VERSION, "id": 1, "paths": "not a list"}))["error"]
    assert "version" in _exchange(path, msgpack.packb({"v": 99, "id": 1, "paths": []}))["error"]
    assert "larger than the limit" in _exchange(path, b"", announced=3 << 20)["error"]
    assert _exchange(path, msgpack.packb({"v": VERSION, "id": 7, "paths": [b"\0bad", b"a/../b", b"x" * 300]}))["files"] \
        == [{"errno": errno.ENOENT}, {"fallback": "the path has '.', '..' or empty components"},
            {"errno": errno.ENAMETOOLONG}]
    assert through_mount([bvol.path / "after-bad-requests"]) == [b"still served"]
    assert Client().read(bvol.path / "after-bad-requests") == b"still served"


@pytest.mark.parametrize(("value", "said"), [
    ("data.sock", "use 'auto', 'off' or an absolute path for the socket"),
    ("/" + "d" * 120, "a Unix socket path has at most 107 bytes"),
])
def test_a_bad_socket_setting_is_named_in_one_line(tmp_path, value, said):
    config = tmp_path / "aifs.toml"
    config.write_text(f'[volume]\nstate_dir = "{tmp_path}/state"\n[fuse]\nbypass_socket = "{value}"\n')
    cp = aifs_cli("config", "check", str(config))
    assert cp.returncode != 0
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and f"fuse.bypass_socket = '{value}': {said}" in lines[0], cp.stderr
