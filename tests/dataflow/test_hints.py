"""Hints as readers send them: several readers each with a plan of their own, within the mount's
bounds on readers and hinted files, forgotten once their reader goes quiet; a bad hint gets a
one-line error and changes nothing; the Python side says clearly what is wrong with its paths;
PrefetchSampler yields its sampler's indices unchanged and hints each epoch's order of its rank."""

from __future__ import annotations

import os
import re
import warnings

import pytest
from s3.helpers_mount import wait_for

import aifs
from aifs.dataflow import ControlError, OrderHint

from .conftest import FILES

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install aifs[torch])")
from torch.utils.data import BatchSampler, DistributedSampler  # noqa: E402

from aifs.torch import PrefetchSampler  # noqa: E402


def plans(volume) -> dict[str, dict]:
    return {plan["reader"]: plan for plan in volume.control("prefetch_status")["plans"]}


def test_plans_per_reader_within_the_mounts_bounds_and_bad_hints_change_nothing(dataset, watchdog):
    volume = dataset.volume
    volume.cold(max_readers=2, max_files=300, files_ahead=4)
    paths = dataset.paths
    assert OrderHint(paths[:100], reader="a").send()[0]["dropped"] == []
    assert OrderHint(paths + paths[:50], reader="b").send()[0]["dropped"] == ["a"]  # 350 files > max_files
    assert OrderHint(paths[:50], reader="c").send()[0]["dropped"] == []
    assert OrderHint(paths[:10], reader="d").send()[0]["dropped"] == ["b"]  # a third reader > max_readers
    assert {reader: plan["files"] for reader, plan in plans(volume).items()} == {"c": 50, "d": 10}

    ino = os.stat(paths[0]).st_ino
    bad = {
        "longer than this mount takes ([prefetch] max_files = 300)": {"inodes": [ino] * 301},
        "inode 1099511627776 (at 1 in the hint) does not exist": {"inodes": [ino, 1 << 40]},
        f"inode {os.stat(paths[0].parent).st_ino} (at 0 in the hint) is not a regular file": {
            "inodes": [os.stat(paths[0].parent).st_ino]},
        "files_ahead: Input should be greater than or equal to 1": {"inodes": [ino], "files_ahead": 0},
        "bytes_ahead: Input should be a valid integer": {"inodes": [ino], "bytes_ahead": "lots"},
        "inodes: List should have at least 1 item": {"inodes": []},
        "inodes.0: Input should be greater than or equal to 1": {"inodes": [0]},
    }
    for message, args in bad.items():
        with pytest.raises(ControlError, match=re.escape(message)) as raised:
            volume.control("prefetch_hint", reader="c", **args)
        assert "\n" not in str(raised.value)
    with pytest.raises(ControlError, match="reader: String should have at least 1 character"):
        volume.control("prefetch_hint", reader="", inodes=[ino])
    assert {reader: plan["files"] for reader, plan in plans(volume).items()} == {"c": 50, "d": 10}
    assert volume.counts()["hints"] == 4
    assert paths[7].read_bytes() == dataset.source[7]  # the mount serves on

    assert volume.control("prefetch_end", reader="c") == {"reader": "c", "ended": True}
    assert set(plans(volume)) == {"d"}


def test_the_python_side_names_what_is_wrong_with_its_paths(dataset, tmp_path):
    missing = dataset.paths[0].parent / "no-such-sample"
    with pytest.raises(FileNotFoundError, match="no-such-sample"):
        aifs.prefetch([dataset.paths[0], missing])
    elsewhere = tmp_path / "local.bin"
    elsewhere.write_bytes(b"x")
    with pytest.raises(ControlError, match="is not on an aifs mount"):
        aifs.prefetch([elsewhere])
    with pytest.raises(IndexError, match="the order names file 200, and there are 200 paths"):
        OrderHint(dataset.paths).send([3, FILES])

    sampler = PrefetchSampler(range(3), [elsewhere] * 3)
    with pytest.warns(RuntimeWarning, match="this epoch is read without prefetch: .* is not on an aifs mount"):
        assert list(sampler) == [0, 1, 2]


def test_distributed_and_batch_samplers_hint_what_they_yield(dataset, watchdog):
    volume = dataset.volume
    volume.cold()
    ranks = [DistributedSampler(range(FILES), num_replicas=2, rank=rank, seed=5) for rank in (0, 1)]
    twins = [DistributedSampler(range(FILES), num_replicas=2, rank=rank, seed=5) for rank in (0, 1)]
    samplers = [PrefetchSampler(rank, dataset.paths, reader=f"rank{i}") for i, rank in enumerate(ranks)]
    orders = []
    for epoch in (0, 1):
        for sampler, twin in zip(samplers, twins):
            sampler.set_epoch(epoch)
            twin.set_epoch(epoch)
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no hint may fail
                orders.append(list(sampler))
            assert orders[-1] == list(twin)
        hinted = plans(volume)
        assert (hinted["rank0"]["files"], hinted["rank1"]["files"]) == (FILES // 2, FILES // 2)
    assert orders[0] != orders[2], "a new epoch, a new order"

    epoch1_rank0 = orders[2]
    with open(dataset.paths[epoch1_rank0[5]], "rb") as f:  # rank 0 reads the sixth file of its order
        assert f.read() == dataset.source[epoch1_rank0[5]]
    hinted = plans(volume)
    assert (hinted["rank0"]["cursor"], hinted["rank1"]["cursor"]) == (5, -1)
    assert volume.counts()["hints"] == 4

    batches = PrefetchSampler(BatchSampler(range(6), batch_size=4, drop_last=False), dataset.paths, reader="batches")
    assert list(batches) == [[0, 1, 2, 3], [4, 5]]
    assert plans(volume)["batches"]["files"] == 6


def test_a_hint_whose_reader_goes_quiet_is_forgotten(dataset, watchdog):
    volume = dataset.volume
    volume.cold(idle_timeout=0.5)
    hint = OrderHint(dataset.paths, files_ahead=4)
    hint.send()
    assert hint.reader in plans(volume)
    wait_for(lambda: hint.reader not in plans(volume), "the quiet reader's hint to be forgotten", timeout=30)
    counts = volume.settled()
    assert counts["blocks_fetched"] + counts["blocks_cancelled"] == 4, counts  # cancelled if not done in time
    assert counts["blocks_wasted"] == counts["blocks_fetched"], counts  # fetched, never read
