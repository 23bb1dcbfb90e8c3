"""`aifs warmup`: after it, reads never reach the bottom tier; a second warmup has nothing to do;
what does not fit in the tier is reported (exit 1); trees deeper than PATH_MAX are warmed whole."""

from __future__ import annotations

import os
import re
from pathlib import Path

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
    assert "0 B loaded" in again.stdout.splitlines()[-1]


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


def test_what_does_not_fit_is_reported(tiered):
    volume = tiered(ram="16MiB")
    files = make_tree(volume.path / "big", 12)
    for i in range(4):
        path = volume.path / "big" / f"large{i}.bin"
        files[path] = os.urandom(8 * MiB)
        path.write_bytes(files[path])
    volume.make_cold()
    total = sum(len(v) for v in files.values())

    cp = aifs_cli("warmup", "--tier", "ram", str(volume.path / "big"))
    assert cp.returncode == 1, cp
    assert re.search(r"^warmed 16 files into ram in [\d.]+ s: [\d.]+ MiB loaded", cp.stdout, re.M), cp.stdout
    assert "MB" not in cp.stdout, cp.stdout
    stderr = cp.stderr.strip().splitlines()
    assert len(stderr) == 1, cp.stderr
    match = re.search(r"aifs: ([\d.]+) MiB of ([\d.]+) MiB in (\d+) files did not fit in the ram tier "
                      r"\(16.0 MiB capacity\)", stderr[0])
    assert match, stderr[0]
    assert float(match[2]) == round(total / MiB, 1)
    assert float(match[1]) >= round((total - 16 * MiB) / MiB, 1) - 0.1  # at least what 16 MiB cannot hold
    assert int(match[3]) >= 2


DEEP_LEVELS = 24


def _deep_dir(root: Path, make: bool) -> int:
    """A descriptor of the directory DEEP_LEVELS below `root`, each level named with 200 bytes
    (made when `make`): its path passes PATH_MAX, so it is reached only through descriptors."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for level in range(DEEP_LEVELS):
        name = f"{level:03d}" + "d" * 197
        if make:
            os.mkdir(name, dir_fd=fd)
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    return fd


def test_trees_deeper_than_path_max_are_warmed(tiered):
    volume = tiered(ram="16MiB")
    tree = volume.path / "deep"
    tree.mkdir()
    (tree / "shallow.bin").write_bytes(os.urandom(300_000))
    assert DEEP_LEVELS * 201 > 4096
    data = os.urandom(2 * MiB + 7)
    fd = _deep_dir(tree, make=True)
    try:
        out = os.open("file.bin", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(out, data)
        os.close(out)
    finally:
        os.close(fd)
    volume.make_cold()

    cp = aifs_cli("warmup", "--tier", "nvme", str(tree))
    assert cp.returncode == 0, cp
    assert cp.stdout.splitlines()[-1].startswith("warmed 2 files into nvme"), cp.stdout

    before = volume.hits()
    fd = _deep_dir(tree, make=False)
    try:
        got = os.open("file.bin", os.O_RDONLY, dir_fd=fd)
        os.posix_fadvise(got, 0, 0, os.POSIX_FADV_DONTNEED)
        assert os.read(got, len(data) + 1) == data
        os.close(got)
    finally:
        os.close(fd)
    assert volume.hits()["objstore"] == before["objstore"]
