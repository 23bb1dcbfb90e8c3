"""Differential test over small files in packs: the operation sequences of
test_differential, with many small files created at a time and remounts that first upload
everything and empty the node's NVMe, so that the steps after them read files back from
their packs in the durable tier (and overwrite, truncate, rename, link and unlink them
there). Every result, errno and tree must still match a plain local directory.

CI runs a bounded number of examples; AIFS_DIFF_PACK_EXAMPLES=N runs more.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule, run_state_machine_as_test

from conftest import TARGET, aifs_cli
from test_differential import CTX, NAMES, DifferentialMachine, blob, diff_settings, op_create

SMALL = 20_000  # the largest small file made here: far below pack_below, so it goes into a pack


class PackedFilesMachine(DifferentialMachine):
    """The volume the machine remounts, and how many packs it has seen go up."""

    volume = None
    packs_uploaded = 0

    @rule(folder=st.sampled_from(NAMES), count=st.integers(1, 40), seed=st.integers(0, 999),
          size=st.integers(0, SMALL))
    def create_small_files(self, folder, count, seed, size):
        for i in range(count):
            self.both(op_create, f"{folder}/s{i}", blob(seed + i, (size + 977 * i) % (SMALL + 1)), 0o644)

    @precondition(lambda self: not self.open_pairs)
    @rule()
    def remount_with_nvme_emptied(self):
        volume = type(self).volume
        cp = aifs_cli("sync", "--wait", str(volume.path))
        assert cp.returncode == 0, cp.stderr
        cp = aifs_cli("status", "--json", str(volume.path))
        assert cp.returncode == 0, cp.stderr
        type(self).packs_uploaded += json.loads(cp.stdout)["uploaded_packs"]
        volume.umount()
        shutil.rmtree(volume.state_dir / "nvme")
        volume.mount()


@pytest.mark.timeout_s(1800)
def test_differential_over_packed_files(make_volume, local_dir):
    if TARGET == "local":
        pytest.skip("needs a real aifs mount to remount (AIFS_TEST_TARGET=local)")
    volume = make_volume("packed-diff")
    CTX.aifs_base, CTX.local_base = volume.path, local_dir
    PackedFilesMachine.volume, PackedFilesMachine.packs_uploaded = volume, 0
    examples = int(os.environ.get("AIFS_DIFF_PACK_EXAMPLES", "8"))
    run_state_machine_as_test(PackedFilesMachine, settings=settings(diff_settings(), max_examples=examples))
    assert PackedFilesMachine.packs_uploaded > 0, "no small file went up in a pack: nothing was read from one"
