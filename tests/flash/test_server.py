"""The block server process: its command line, its budget, and its robustness to bad clients."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from aifs.cli.flash_cmd import flash
from aifs.rdma.device import Probe
from aifs.rdma.tcp import TcpConnection
from aifs.rdma.transport import Address, BlockMissing, RemoteError

from .blocks import content
from .raw import RawClient
from .servers import REPO, child_env, new_secret_file

KB = 1024


def connect(server) -> TcpConnection:
    return TcpConnection(Address.parse(server.address), timeout=5.0, secret=server.secret)


GOOD = ["--capacity", "1GiB", "--listen", "127.0.0.1:0"]


@pytest.mark.parametrize("args, message", [
    (["--capacity", "lots", "--listen", "127.0.0.1:0", "--secret-file", "{secret}"], "is not a size"),
    (["--capacity", "1GiB", "--listen", "localhost", "--secret-file", "{secret}"], "not HOST:PORT"),
    (["--capacity", "1GiB", "--secret-file", "{secret}"], "Missing option '--listen'"),
    ([*GOOD, "--secret-file", "{secret}", "--transport", "verbs"], "cannot run here"),
    (GOOD, "--secret-file is required: clients must prove they hold the volume's secret. Make one with "
           "`aifs flash secret FILE`"),
    ([*GOOD, "--secret-file", "{tmp}/none"], "does not exist; make one with `aifs flash secret {tmp}/none`"),
    ([*GOOD, "--secret-file", "{open}"], "other users may read or change it (mode 644); run `chmod 600 {open}`"),
    ([*GOOD, "--secret-file", "{short}"], "holds 5 characters, a secret needs at least 32"),
    ([*GOOD, "--secret-file", "{secret}", "--idle-timeout", "0"], "0.0 is not in the range x>0"),
    ([*GOOD, "--secret-file", "{secret}", "--max-block-size", "0"], "'0' is no size at all"),
])
def test_bad_arguments_are_refused_with_the_reason(tmp_path, args, message, monkeypatch):
    monkeypatch.setattr("aifs.rdma.select.probe_verbs", lambda device: Probe(None, "no RDMA device (test)"))
    files = {"tmp": tmp_path, "secret": new_secret_file(tmp_path / "secret"), "open": tmp_path / "open",
             "short": tmp_path / "short"}
    files["open"].write_text("x" * 40)
    files["open"].chmod(0o644)
    files["short"].write_text("short\n")
    files["short"].chmod(0o600)
    args = [arg.format(**files) for arg in args]
    result = CliRunner().invoke(flash, ["serve", "--dir", str(tmp_path / "d"), *args])
    assert result.exit_code == 2 and " ".join(message.format(**files).split()) in " ".join(result.output.split()), \
        result.output
    assert not (tmp_path / "d").exists()


def test_a_secret_is_made_for_the_owner_only_and_never_overwritten(tmp_path):
    path = tmp_path / "volume.secret"
    made = subprocess.run([sys.executable, "-m", "aifs", "flash", "secret", str(path)], cwd=REPO, env=child_env(),
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0 and "wrote a new secret" in made.stdout, made.stderr
    assert path.stat().st_mode & 0o777 == 0o600 and len(path.read_text().strip()) == 64
    first = path.read_text()
    again = subprocess.run([sys.executable, "-m", "aifs", "flash", "secret", str(path)], cwd=REPO, env=child_env(),
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "already exists" in again.stderr and "Traceback" not in again.stderr
    assert path.read_text() == first


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
    with RawClient(server.port) as bad:
        bad.send(b"\xff" * 64)
        assert bad.hung_up()
    with RawClient(server.port, server.secret) as odd:
        answer, _ = odd.request({"op": "launch", "rid": 5})
        assert answer["rid"] == 5 and answer["err"] == "bad" and "unknown op" in answer["msg"]
    assert conn.read(1) == b"still here"
    conn.close()


def test_sigterm_stops_the_server_cleanly(flash_servers):
    (server,) = flash_servers(1)
    server.stop()
    assert server.proc.returncode == 0
