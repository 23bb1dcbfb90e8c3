"""A reader keeps the mount's answers and reads again without asking, and still sees every
change the moment it is made: each change below is followed at once by a read without FUSE,
compared with a read through the mount. A mount that stops takes its kept answers with it."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from aifs.client import Client

from .conftest import BLOCK, shared_memory_held, shared_memory_since, through_mount

FILES = 40


def _read_both(client: Client, paths: list[Path]) -> tuple[list, list]:
    """(without FUSE, through the mount): bytes, or the name of the error."""
    found = [data if isinstance(data, bytes) else type(data).__name__
             for data in client.read_many(paths, errors="return")]
    return found, through_mount(paths)


@pytest.fixture
def dataset(bvol) -> list[Path]:
    rng = random.Random(2)
    root = bvol.path / f"kept-{rng.randrange(1 << 30)}"
    paths = [root / f"c{i % 4}" / f"s{i // 4:03d}" for i in range(FILES)]  # the same names in each directory
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(rng.randrange(1, 3 * BLOCK)))
    return paths


def test_a_second_epoch_is_read_without_asking_the_mount(dataset):
    client = Client()
    first = client.read_many(dataset)
    assert client.counts.bypass == FILES and client.counts.remembered == 0
    second = client.read_many(dataset)
    assert client.counts.remembered == FILES
    assert first == second == through_mount(dataset)


def test_readers_use_the_answers_any_root_reader_asked_for(dataset):
    expected = through_mount(dataset)  # first, as a read through the mount changes access times
    before = shared_memory_held()
    asking, sharing = Client(), Client()  # two connections, as two DataLoader workers have
    assert asking.read_many(dataset) == expected
    assert sharing.read(dataset[0]) == expected[0]  # connects: the board, a segment
    assert sharing.read_many(dataset[1:]) == expected[1:]
    counts = sharing.counts
    assert counts.shared == counts.remembered and counts.shared >= (FILES - 1) // 2, counts
    assert shared_memory_since(before) == ["aifs-answers", "aifs-answers", "aifs-changes", "aifs-changes"]
    dataset[3].write_bytes(b"replaced")  # the board's answer for it no longer holds
    assert sharing.read(dataset[3]) == b"replaced"
    assert sharing.counts.remembered == counts.remembered
    assert asking.read_many(dataset) == sharing.read_many(dataset) == through_mount(dataset)


def test_without_a_board_each_reader_keeps_its_own_answers(new_volume):
    volume = new_volume("bypass_answers = 0")
    volume.mount()
    path = volume.path / "own"
    path.write_bytes(b"z" * 100)
    path.read_bytes()
    before = shared_memory_held()
    asking, other = Client(), Client()
    assert asking.read(path) == asking.read(path) == other.read(path) == b"z" * 100
    assert (asking.counts.remembered, other.counts.remembered) == (1, 0)
    assert shared_memory_since(before) == ["aifs-changes", "aifs-changes"]


def _mutations(paths: list[Path], rng: random.Random) -> list:
    """Changes of the data set, each as plain calls through the mount."""
    victim = rng.choice(paths)
    other = rng.choice([p for p in paths if p != victim])

    def overwrite_in_place() -> None:
        with open(victim, "r+b") as f:
            f.seek(rng.randrange(max(1, victim.stat().st_size)))
            f.write(rng.randbytes(100))

    def truncate() -> None:
        os.truncate(victim, rng.randrange(0, 2 * BLOCK))

    def append() -> None:
        with open(victim, "ab") as f:
            f.write(rng.randbytes(BLOCK // 3))

    def rename_over() -> None:
        os.replace(other, victim)
        other.write_bytes(rng.randbytes(500))

    def unlink_and_recreate() -> None:
        victim.unlink()
        victim.write_bytes(rng.randbytes(700))

    def swap_directories() -> None:
        a, b = victim.parent, other.parent
        if a != b:
            os.rename(a, a.with_name("swap"))
            os.rename(b, a)
            os.rename(a.with_name("swap"), b)

    def unlink() -> None:
        if victim.exists():
            victim.unlink()

    return [overwrite_in_place, truncate, append, rename_over, unlink_and_recreate, swap_directories, unlink]


def test_every_change_is_seen_at_once(dataset):
    client, rng = Client(), random.Random(9)
    for step in range(60):
        kept, expected = _read_both(client, dataset)
        assert kept == expected, f"before step {step}"
        present = [p for p in dataset if p.exists()]
        assert len(present) > 1, f"step {step}: {through_mount(dataset)[:8]}"
        change = rng.choice(_mutations(present, rng))
        change()
        assert _read_both(client, dataset)[0] == through_mount(dataset), f"after step {step}: {change.__name__}"
    assert client.counts.remembered > FILES * 10  # most reads went without asking


def test_a_file_being_written_is_read_as_the_mount_reads_it(dataset):
    client = Client()
    path = dataset[0]
    assert client.read(path) == client.read(path) == path.read_bytes()
    assert client.counts.remembered == 1
    with open(path, "r+b") as f:
        f.write(b"new bytes still in the mount's buffers")
        f.flush()
        assert client.read(path) == path.read_bytes()
        assert client.read(path).startswith(b"new bytes")
    assert client.read(path) == path.read_bytes()


def test_kept_answers_go_with_a_mount_killed(new_volume):
    volume = new_volume()
    volume.mount()
    path = volume.path / "kept"
    path.write_bytes(b"x" * BLOCK)
    client = Client()
    assert client.read(path) == client.read(path) == b"x" * BLOCK
    assert client.counts.remembered == 1
    volume.kill9()
    deadline = time.monotonic() + 10  # the killed mount's socket closes as its process finishes exiting
    while not isinstance(found := client.read_many([path], errors="return")[0], OSError):
        assert found == b"x" * BLOCK
        assert time.monotonic() < deadline, "a read after the mount was killed still used its answer"
        time.sleep(0.01)
    volume.mount()
    path.write_bytes(b"y" * 100)  # changed through the new mount, whose table is another
    assert client.read(path) == b"y" * 100
