"""The warmup's tree walk names what it cannot read and goes on with the rest (run as an
unprivileged user, for whom a directory of mode 000 is closed)."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
WALK = ("import sys; from pathlib import Path; from aifs.cli.treewalk import TreeWalk; "
        "walk = TreeWalk(Path(sys.argv[1])); print(len(list(walk))); print(*walk.unreadable, sep='\\n')")


@pytest.fixture
def open_tree():
    """A tree any user may enter, outside pytest's private temporary directory."""
    top = Path(tempfile.mkdtemp(prefix="aifs-walk-"))
    os.chmod(top, 0o755)
    yield top
    shutil.rmtree(top)  # as root, closed directories included


def test_unreadable_entries_are_named_and_the_rest_is_walked(open_tree):
    (open_tree / "a" / "b").mkdir(parents=True)
    (open_tree / "a" / "b" / "f").write_bytes(b"x")
    (open_tree / "g").write_bytes(b"y")
    (open_tree / "closed").mkdir()
    (open_tree / "closed" / "hidden").write_bytes(b"z")
    os.chmod(open_tree / "closed", 0)
    done = subprocess.run([*NOBODY, sys.executable, "-c", WALK, str(open_tree)], capture_output=True, text=True,
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=60, check=True)
    found, *unreadable = done.stdout.splitlines()
    assert found == "2"
    assert unreadable == [f"{open_tree}/closed: Permission denied"]
