"""The volume's secret: made by `aifs flash secret`, required and checked in a remote tier's config,
and the handshake and request MACs built on it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from aifs.rdma.auth import AuthError, ClientHandshake, RequestMacs, Secret, ServerHandshake
from aifs.rdma.wire import FrameReader, frame

from .servers import REPO, child_env, new_secret_file

REMOTE_CONFIG = """\
[volume]
state_dir = "{state}"

[[tiers]]
kind = "nvme"
capacity = "1GiB"

[[tiers]]
kind = "remote"
servers = ["127.0.0.1:7400"]
{secret_line}

[[tiers]]
kind = "objstore"
"""


def aifs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aifs", *args], cwd=REPO, env=child_env(), capture_output=True,
                          text=True, timeout=60)


def check_config(tmp_path, secret_line: str) -> subprocess.CompletedProcess:
    config = tmp_path / "aifs.toml"
    config.write_text(REMOTE_CONFIG.format(state=tmp_path / "state", secret_line=secret_line))
    return aifs("config", "check", str(config))


def test_a_remote_tier_needs_a_secret_file(tmp_path):
    done = check_config(tmp_path, "")
    assert done.returncode == 2 and "tiers[1].secret_file: required key is missing" in done.stderr, done.stderr


@pytest.mark.parametrize("prepare, problem", [
    (lambda path: None, "does not exist; make one with `aifs flash secret {path}`"),
    (lambda path: path.mkdir(), "is a directory; make one with `aifs flash secret {path}`"),
    (lambda path: (path.write_text("x" * 64), path.chmod(0o640)),
     "other users may read or change it (mode 640); run `chmod 600 {path}`"),
    (lambda path: (path.write_text("too short\n"), path.chmod(0o600)),
     "holds 9 characters, a secret needs at least 32"),
])
def test_an_unusable_secret_file_is_refused_with_what_to_do(tmp_path, prepare, problem):
    path = tmp_path / "flash.secret"
    prepare(path)
    done = check_config(tmp_path, f'secret_file = "{path}"')
    expected = f"tiers[1].secret_file = '{path}': {problem.format(path=path)}"
    assert done.returncode == 2 and expected in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_relative_secret_file_is_found_beside_the_config(tmp_path):
    new_secret_file(tmp_path / "flash.secret")
    done = check_config(tmp_path, 'secret_file = "flash.secret"')
    assert done.returncode == 0, done.stderr
    shown = aifs("config", "show", "--json", str(tmp_path / "aifs.toml"))
    assert shown.returncode == 0, shown.stderr
    remote = next(t for t in json.loads(shown.stdout)["tiers"] if t["kind"] == "remote")
    assert remote["secret_file"] == str(tmp_path / "flash.secret")


def test_a_secret_is_never_shown_in_a_repr():
    secret = Secret(b"k" * 40)
    assert "k" * 10 not in repr(secret)


def handshake(client_secret: Secret, server_secret: Secret) -> tuple[RequestMacs, RequestMacs]:
    server = ServerHandshake(server_secret)
    client = ClientHandshake(client_secret, "test server")
    proof, checker = server.accept(client.answer(server.hello))
    return client.finish(proof), checker


def test_both_sides_derive_the_same_session_and_requests_count():
    signer, checker = handshake(Secret(b"s" * 32), Secret(b"s" * 32))
    reader = FrameReader()
    reader.check = checker.check
    stream = b"".join(signer.seal(frame({"op": "has", "id": i})) for i in range(3))
    reader.space()[:len(stream)] = stream
    reader.filled(len(stream))
    assert [reader.header()[0]["id"] for _ in range(3)] == [0, 1, 2]
    replay = signer.seal(frame({"op": "has", "id": 9}))
    reader.space()[:len(replay) * 2] = replay * 2
    reader.filled(len(replay) * 2)
    assert reader.header()[0]["id"] == 9
    with pytest.raises(AuthError, match="request 5 failed its MAC"):
        reader.header()


def test_a_wrong_secret_fails_on_either_side():
    with pytest.raises(AuthError, match="does not hold this server's secret"):
        handshake(Secret(b"a" * 32), Secret(b"b" * 32))
    server = ServerHandshake(Secret(b"b" * 32))
    client = ClientHandshake(Secret(b"a" * 32), "impostor")
    client.answer(server.hello)
    with pytest.raises(AuthError, match="does not hold our secret"):
        client.finish({"mac": b"\0" * 32})
