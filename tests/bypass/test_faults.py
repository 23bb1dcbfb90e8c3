"""What goes wrong never yields wrong bytes: a mount killed under its readers (each read returns
the right bytes or raises OSError, and a new mount is found again), and a segment record damaged
on disk (caught by the reader's checksum check; the read goes through the mount instead)."""

from __future__ import annotations

import multiprocessing
import os
import random
import time
from pathlib import Path

from conftest import aifs_cli  # tests/conftest.py

from aifs.client import Client

from .conftest import BLOCK, NOBODY, KiB, as_user

READERS = 4
FILES = 200


def _reader(paths: list[Path], expected: list[bytes], rounds, slot: int, stop, results) -> None:
    """Reads random batches until told to stop, counting its rounds in `rounds[slot]`; reports
    how many reads gave the right bytes, how many an error, and which gave wrong bytes."""
    client, rng = Client(batch=32), random.Random(slot)
    right = errors = 0
    wrong: list[str] = []
    while not stop.is_set():
        indices = rng.sample(range(len(paths)), 32)
        for index, data in zip(indices, client.read_many([paths[i] for i in indices], errors="return")):
            if isinstance(data, OSError):
                errors += 1
            elif data == expected[index]:
                right += 1
            else:
                wrong.append(str(paths[index]))
        rounds[slot] += 1
    results.put((right, errors, wrong))


def _wait_for_rounds(rounds, at_least: list[int]) -> None:
    """Until every reader has finished the rounds asked of it (bounded)."""
    deadline = time.monotonic() + 30
    while any(done < wanted for done, wanted in zip(rounds, at_least)):
        assert time.monotonic() < deadline, f"readers stalled: {list(rounds)} of {at_least} rounds"
        time.sleep(0.01)


def test_a_mount_killed_under_its_readers_never_gives_wrong_bytes(new_volume):
    volume = new_volume()
    volume.mount()
    rng = random.Random(3)
    paths = [volume.path / f"f{i:03d}" for i in range(FILES)]
    expected = [rng.randbytes(rng.randrange(1, 3 * BLOCK)) for _ in paths]
    for path, data in zip(paths, expected):
        path.write_bytes(data)
    parent = Client()
    assert parent.read_many(paths[:10]) == expected[:10]
    assert parent.counts.bypass == 10

    context = multiprocessing.get_context("fork")
    rounds, stop, results = context.Array("i", READERS), context.Event(), context.Queue()
    readers = [context.Process(target=_reader, args=(paths, expected, rounds, slot, stop, results))
               for slot in range(READERS)]
    for reader in readers:
        reader.start()
    try:
        _wait_for_rounds(rounds, [2] * READERS)  # every reader is well under way
        volume.kill9()
        _wait_for_rounds(rounds, [done + 2 for done in rounds])  # each read a whole round after the kill
    finally:
        stop.set()
        outcomes = [results.get(timeout=60) for _ in readers]
        for reader in readers:
            reader.join(timeout=10)
    assert [wrong for _, _, wrong in outcomes] == [[]] * READERS
    assert all(right > 0 and errors > 0 for right, errors, _ in outcomes), outcomes

    volume.mount()  # over the socket file the killed mount left behind
    assert parent.read_many(paths[:10]) == expected[:10]
    assert parent.counts.bypass == 20  # a new connection, to the new mount's socket


def _segment_record(state_dir: Path, data: bytes) -> tuple[Path, int]:
    """The segment file holding `data` (the whole of one block), and where."""
    for segment in sorted((state_dir / "nvme").glob("seg-*.log")):
        at = segment.read_bytes().find(data)
        if at >= 0:
            return segment, at
    raise AssertionError(f"no segment under {state_dir} holds the block")


def _flip_a_byte(segment: Path, at: int) -> None:
    fd = os.open(segment, os.O_RDWR)
    try:
        os.pwrite(fd, bytes([os.pread(fd, 1, at)[0] ^ 0xFF]), at)
    finally:
        os.close(fd)


def _read(path: Path) -> tuple:
    client = Client()
    data = client.read(path)
    counts = client.counts
    return data, counts.bypass, counts.mount, counts.retried


def test_a_damaged_segment_record_is_caught_by_the_checksum_and_read_through_the_mount(new_volume):
    volume = new_volume()
    volume.mount()
    rng = random.Random(5)
    files = {name: rng.randbytes(BLOCK) for name in ("for-root", "for-nobody")}
    for name, data in files.items():
        (volume.path / name).write_bytes(data)
    cp = aifs_cli("sync", "--wait", str(volume.path))  # the durable copy the mount falls back on
    assert cp.returncode == 0, cp.stderr
    volume.remount()  # nothing in RAM, nor in the kernel's page cache: the mount reads NVMe
    for name, data in files.items():
        segment, at = _segment_record(volume.state_dir, data)
        _flip_a_byte(segment, at + 12 * KiB)

    # root reads the record itself, from the segment's descriptor
    assert _read(volume.path / "for-root") == (files["for-root"], 0, 1, 1)
    # the mount's read dropped the rotten copy and fetched a sound one: read without FUSE again
    assert _read(volume.path / "for-root") == (files["for-root"], 1, 0, 0)
    # another user gets the bytes inline, as the mount read them from the damaged record
    assert as_user(NOBODY, _read, volume.path / "for-nobody") == (files["for-nobody"], 0, 1, 1)
