"""A user who may not open a mount's control socket gets one line saying what it needs, from
every command that uses it, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO, MOUNT_TIMEOUT

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
COMMANDS = [
    ["status"],
    ["sync"],
    ["sync", "--wait"],
    ["pin", "--tier", "ram"],
    ["unpin"],
    ["warmup"],
]


def aifs_as_nobody(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), HOME="/nonexistent")
    return subprocess.run([*NOBODY, sys.executable, "-m", "aifs", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=MOUNT_TIMEOUT, stdin=subprocess.DEVNULL)


@pytest.fixture
def readable_tree(d):
    """A directory and a file on the mount that any user may read."""
    (d / "f.bin").write_bytes(os.urandom(10_000))
    os.chmod(d / "f.bin", 0o644)
    return d


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_user_without_access_to_the_socket_is_told_what_it_needs(mounted, readable_tree, command):
    cp = aifs_as_nobody(*command, str(readable_tree))
    assert cp.returncode == 1, cp
    assert "Traceback" not in cp.stderr, cp.stderr
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1, cp.stderr
    assert "permission denied on the control socket" in lines[0], lines[0]
    assert "needs root or the socket's group" in lines[0], lines[0]
