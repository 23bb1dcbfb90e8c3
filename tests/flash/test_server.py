"""The block server process: its command line, its budget, and its robustness to bad clients."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from aifs.cli.flash_cmd import flash
from aifs.rdma.device import Probe
from aifs.rdma.tcp import TcpConnection
from aifs.rdma.transport import Address, BlockMissing, RemoteError
from aifs.rdma.wire import frame

from .blocks import content

KB = 1024


def connect(server) -> TcpConnection:
    return TcpConnection(Address.parse(server.address), timeout=5.0)


@pytest.mark.parametrize("args, message", [
    (["--capacity", "lots", "--listen", "127.0.0.1:0"], "is not a size"),
    (["--capacity", "1GiB", "--listen", "localhost"], "not HOST:PORT"),
    (["--capacity", "1GiB"], "Missing option '--listen'"),
    (["--capacity", "1GiB", "--listen", "127.0.0.1:0", "--transport", "verbs"], "cannot run here"),
])
def test_bad_arguments_are_refused_with_the_reason(tmp_path, args, message, monkeypatch):
    monkeypatch.setattr("aifs.rdma.select.probe_verbs", lambda device: Probe(None, "no RDMA device (test)"))
    result = CliRunner().invoke(flash, ["serve", "--dir", str(tmp_path / "d"), *args])
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "d").exists()


def test_the_budget_holds_and_the_oldest_block_goes_first(flash_servers):
    (server,) = flash_servers(1, capacity="1MiB")
    conn = connect(server)
    for block_id in range(1, 6):
        conn.write(block_id, content(block_id, 300 * KB))
    stat = conn.stat()
    assert stat.used <= stat.capacity == 1 << 20 and stat.blocks == 3
    with pytest.raises(BlockMissing):
        conn.read(1)
    assert conn.read(5) == content(5, 300 * KB)
    with pytest.raises(RemoteError) as refused:
        conn.write(9, content(9, 2 << 20))
    assert refused.value.code == "full"
    conn.close()


def test_garbage_from_one_client_does_not_disturb_the_others(flash_servers):
    (server,) = flash_servers(1)
    conn = connect(server)
    conn.write(1, b"still here")
    with socket.create_connection(("127.0.0.1", server.port)) as bad:
        bad.sendall(b"\xff" * 64)
        bad.settimeout(5)
        assert bad.recv(100) == b""  # the server hung up on it
    with socket.create_connection(("127.0.0.1", server.port)) as odd:
        odd.sendall(frame({"op": "launch", "rid": 5}))
        odd.settimeout(5)
        assert b"unknown op" in odd.recv(1000)
    assert conn.read(1) == b"still here"
    conn.close()


def test_sigterm_stops_the_server_cleanly(flash_servers):
    (server,) = flash_servers(1)
    server.stop()
    assert server.proc.returncode == 0
