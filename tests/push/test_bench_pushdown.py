"""`aifs bench --mode pushdown` end to end at a tiny scale: both columns measured, the results
compared by the mode itself, and the pushed filter moving a fraction of the mount's bytes."""

import json
import shutil
import tempfile
from pathlib import Path

from conftest import aifs_cli  # tests/conftest.py


def test_pushdown_mode_moves_a_fraction_of_the_mounts_bytes():
    base = Path(tempfile.mkdtemp(prefix="aifs-push-"))  # short: the control socket's path must fit AF_UNIX
    try:
        cp = aifs_cli("bench", "--mode", "pushdown", "--scale", "0.01", "--json", str(base), timeout=180)
        assert cp.returncode == 0, cp.stderr
        document = json.loads(cp.stdout)
        assert list(document["results"]) == ["moved", "wall"], document
        moved = document["results"]["moved"]
        assert moved["push"] > 0 and moved["mount"] > 0, moved
        assert moved["push"] <= 0.15 * moved["mount"], moved  # a tenth of the records, plus boundary records
        assert all(value > 0 for value in document["results"]["wall"].values()), document
        assert list(base.iterdir()) == []
    finally:
        shutil.rmtree(base, ignore_errors=True)
