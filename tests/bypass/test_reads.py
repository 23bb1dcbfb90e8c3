"""Reads without FUSE give exactly what reads through the mount give, for every kind of file, from
eight forked readers at once (DataLoader workers), for root (segment descriptors) and for an
unprivileged user (bytes inline, and the mount's own permission errors)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import aifs.client
from aifs.client import Client, Dataset

from .conftest import BLOCK, NOBODY, KiB, as_user, in_children, shared_memory_held, shared_memory_since, through_mount

READERS = 8
BATCH = 16


class Tree:
    """A mixed tree on the mount, and which of its files only the mount can serve."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths: list[Path] = []
        self.through_mount: set[Path] = set()  # files the data socket answers "fallback" for

    def add(self, name: str, data: bytes = b"", mode: int = 0o644) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
        self.paths.append(path)
        return path


def _build(root: Path) -> Tree:
    rng = random.Random(11)
    tree = Tree(root)
    for i in range(90):
        tree.add(f"small/d{i % 3}/s{i:03d}", rng.randbytes(rng.randrange(0, 20 * KiB)))
    tree.add("small/empty")
    for name, size in (("one-block", BLOCK), ("blocks", 3 * BLOCK + 17), ("many-blocks", 16 * BLOCK + 5)):
        tree.add(f"big/{name}", rng.randbytes(size))
    sparse = tree.add("odd/sparse")
    with open(sparse, "r+b") as f:  # a hole, data across a block boundary, a hole to the end
        f.seek(2 * BLOCK - 100)
        f.write(rng.randbytes(300))
        f.truncate(6 * BLOCK + 1)
    overwritten = tree.add("odd/overwritten", rng.randbytes(5 * BLOCK))
    with open(overwritten, "r+b") as f:
        f.seek(BLOCK + 1000)
        f.write(rng.randbytes(BLOCK))
    tree.add("private/secret", rng.randbytes(3000), mode=0o600)
    (root / "closed").mkdir(mode=0o700)
    tree.add("closed/inside", rng.randbytes(100))
    os.symlink("../small/d0/s000", root / "odd/link")
    tree.paths.append(root / "odd/link")
    tree.through_mount.add(root / "odd/link")
    return tree


@pytest.fixture(scope="module")
def tree(bvol) -> Tree:
    return _build(bvol.path / "tree")


@pytest.fixture
def writer(tree: Tree) -> Iterator[Path]:
    """A file another process is writing: open, with bytes the mount holds but has not sealed."""
    path = tree.root / "odd/being-written"
    script = ("import os, sys\n"
              "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)\n"
              f"for i in range(3): os.write(fd, bytes([65 + i]) * {BLOCK // 2 + 333})\n"
              "print('ready', flush=True)\n"
              "sys.stdin.read()\n"
              "os.close(fd)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield path
    finally:
        proc.communicate(timeout=30)


def _read_as_dataloader_worker(paths: list[Path], expected: list[bytes | str], seed: int) -> tuple:
    """What a DataLoader worker does: batches of random indices through Dataset.__getitems__."""
    dataset = Dataset(paths)
    order = list(range(len(paths)))
    random.Random(seed).shuffle(order)
    wrong = []
    for start in range(0, len(order), BATCH):
        indices = order[start:start + BATCH]
        for index, data in zip(indices, dataset.__getitems__(indices)):
            if data != expected[index]:
                wrong.append(str(paths[index]))
    counts = dataset.client.counts
    return wrong, counts.bypass, counts.mount, counts.retried


def test_eight_forked_readers_get_the_mounts_bytes_for_every_kind_of_file(tree, writer):
    paths = tree.paths + [writer]
    expected = through_mount(paths)
    assert all(isinstance(data, bytes) for data in expected)
    assert len(expected[-1]) == 3 * (BLOCK // 2 + 333)  # the writer's bytes, unsealed in the mount
    parent = aifs.client.default_client()
    assert parent.read_many(paths[:20]) == expected[:20]
    assert parent.open_segments > 0  # root holds segment descriptors the children must not use
    outcomes = in_children(_read_as_dataloader_worker, [(paths, expected, seed) for seed in range(READERS)])
    fallbacks = len(tree.through_mount) + 1  # the symbolic link, the file being written
    for wrong, bypass, mount, retried in outcomes:
        assert wrong == []
        assert (bypass, mount, retried) == (len(paths) - fallbacks, fallbacks, 0)


def _read_as_nobody(paths: list[Path]) -> tuple:
    before = shared_memory_held()
    client = Client()
    found = [data if isinstance(data, bytes) else type(data).__name__
             for data in client.read_many(paths, errors="return")]
    return found, through_mount(paths), client.counts.bypass, client.open_segments, shared_memory_since(before)


def test_an_unprivileged_reader_gets_bytes_inline_and_the_mounts_permission_errors(tree):
    readable = [tree.root / "small/d1/s001", tree.root / "big/blocks", tree.root / "odd/sparse"]
    denied = [tree.root / "private/secret", tree.root / "closed/inside"]
    Client().read_many(readable)  # root's answers go on the board
    found, mount, bypass, segments, shared = as_user(NOBODY, _read_as_nobody, readable + denied)
    assert found == mount
    assert found[len(readable):] == ["PermissionError", "PermissionError"]
    assert found[:len(readable)] == [path.read_bytes() for path in readable]
    assert (bypass, segments) == (len(readable), 0)  # served, and never a segment's descriptor
    assert shared == ["aifs-changes"]  # nor the board, whose answers name root's files and records


def _read_around_closing_the_directory(path: Path) -> list:
    client = Client()
    found = []
    for mode in (0o700, 0o000, 0o700):  # the directory is this user's own
        os.chmod(path.parent, mode)
        found.append(client.read_many([path], errors="return")[0])
    return [data if isinstance(data, bytes) else type(data).__name__ for data in found]


def test_a_directory_closed_between_requests_is_closed_to_the_next(bvol):
    own = bvol.path / "own-dir"
    own.mkdir()
    (own / "f").write_bytes(b"mine")
    os.chown(own, NOBODY, NOBODY)
    os.chown(own / "f", NOBODY, NOBODY)
    assert as_user(NOBODY, _read_around_closing_the_directory, own / "f") == [b"mine", "PermissionError", b"mine"]


def test_errors_are_those_of_the_mount(tree):
    root = str(tree.root)
    paths = [f"{root}/missing", f"{root}/small", f"{root}/small/d0/s000/below", f"{root}/small/d0/s000/",
             f"{root}/small/./d0/../d0/s000", f"{root}//small/./d1/s001"]
    client = Client()
    found = [data if isinstance(data, bytes) else type(data).__name__
             for data in client.read_many(paths, errors="return")]
    assert found == through_mount(paths)
    assert found[:4] == ["FileNotFoundError", "IsADirectoryError", "NotADirectoryError", "NotADirectoryError"]
    assert isinstance(found[4], bytes) and isinstance(found[5], bytes)
    with pytest.raises(FileNotFoundError) as raised:
        client.read_many([f"{root}/small/d0/s000", f"{root}/missing"])
    assert raised.value.filename == f"{root}/missing"


def test_dataset_reads_samples_with_the_transform(tree):
    paths = [tree.root / "small/d0/s000", tree.root / "big/blocks", tree.root / "small/empty"]
    dataset = Dataset(paths, transform=len)
    assert len(dataset) == 3
    assert dataset[1] == 3 * BLOCK + 17
    assert dataset.__getitems__([2, 0]) == [0, len(paths[0].read_bytes())]


@pytest.mark.filterwarnings("ignore:This DataLoader will create", "ignore:Failed to initialize NumPy")
def test_a_torch_dataloader_reads_the_dataset_in_batches(tree):
    torch_data = pytest.importorskip("torch.utils.data", reason="PyTorch is not installed")
    paths = [path for path in tree.paths if path not in tree.through_mount]
    loader = torch_data.DataLoader(Dataset(paths), batch_size=16, num_workers=4)
    samples = [data for batch in loader for data in batch]
    assert samples == through_mount(paths)
