"""`aifs warmup`: after it, reads never reach the bottom tier; a second warmup has nothing to do."""

from __future__ import annotations

import os

from tests.tiering.conftest import MiB, read_uncached, aifs_cli


def make_tree(root, count: int) -> dict:
    files = {}
    for i in range(count):
        sub = root / f"shard{i % 3}"
        sub.mkdir(parents=True, exist_ok=True)
        path = sub / f"sample{i:03d}.bin"
        files[path] = os.urandom((i % 7 + 1) * 96 * 1024 + i)
        path.write_bytes(files[path])
    return files


def test_warmup_then_read_touches_no_cold_tier(tiered):
    volume = tiered(ram="16MiB")
    files = make_tree(volume.path / "dataset", 40)
    big = volume.path / "big.bin"
    files[big] = os.urandom(6 * MiB + 5)
    big.write_bytes(files[big])
    volume.make_cold()

    cp = aifs_cli("warmup", "--tier", "nvme", "--jobs", "3", str(volume.path / "dataset"), str(big))
    assert cp.returncode == 0, cp.stderr
    total = sum(len(v) for v in files.values())
    lines = cp.stdout.strip().splitlines()
    assert lines[-2].startswith("warmup -> nvme: 41/41 files")  # plain lines: stdout is a pipe
    assert lines[-1].startswith("warmed 41 files into nvme")
    status = volume.status()
    assert status["tiers"]["nvme"]["used"] >= total

    before = volume.hits()
    for path, data in files.items():
        assert read_uncached(path) == data
    after = volume.hits()
    assert after["objstore"] == before["objstore"]
    assert after["nvme"] > before["nvme"]

    again = aifs_cli("warmup", str(volume.path))
    assert again.returncode == 0, again.stderr
    assert "0.00B loaded" in again.stdout.splitlines()[-1]


def test_warmup_into_ram(tiered):
    volume = tiered(ram="16MiB")
    files = make_tree(volume.path / "small", 12)
    volume.make_cold()
    cp = aifs_cli("warmup", "--tier", "ram", str(volume.path / "small"))
    assert cp.returncode == 0, cp.stderr
    before = volume.hits()
    for path, data in files.items():
        assert read_uncached(path) == data
    after = volume.hits()
    assert (after["nvme"], after["objstore"]) == (before["nvme"], before["objstore"])


def test_warmup_outside_a_mount_fails_clearly(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    cp = aifs_cli("warmup", str(tmp_path))
    assert cp.returncode != 0
    assert "is not on an aifs mount" in cp.stderr


def test_progress_lines_stay_in_order_across_threads(capsys):
    from concurrent.futures import ThreadPoolExecutor

    from aifs.cli.warmup_progress import WarmupProgress

    progress = WarmupProgress(400, 400 * 10, "nvme")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: progress.advance(1, 10, 10, 0), range(400)))
    lines = capsys.readouterr().out.splitlines()
    done = [int(line.split(": ")[1].split("/")[0]) for line in lines]
    assert done == sorted(done) and done[-1] == 400
    assert progress.summary().startswith("warmed 400 files into nvme")
