"""Small files packed into large objects: through the mount, against a real S3 endpoint
(moto), with the requests counted in the endpoint's own request log."""

from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import pattern

from aifs.tiers.s3_marker import MARKER_NAME

from .helpers_mount import (PREFIX, aifs_ok, assert_digests, make_s3_volume, poll_status, sha256_file,
                            sync_wait, wait_for)

__all__ = ["make_s3_volume"]  # the fixture, imported so pytest finds it
pytestmark = pytest.mark.timeout_s(600)


def requests(server, bucket: str, method: str) -> int:
    """How many `method` requests for objects of the volume the endpoint has answered."""
    return len(re.findall(rf'{method} /{bucket}/{PREFIX}\S+ HTTP', server.log.read_text(errors="replace")))


def write_small_files(root: Path, count: int, rng: random.Random, lo: int = 1, hi: int = 16 << 10) -> dict[str, str]:
    """`count` files of random sizes in [lo, hi] bytes, 100 to a folder; their sha256 by name."""
    digests = {}
    for i in range(count):
        name = f"d{i // 100:03d}/f{i:05d}"
        if i % 100 == 0:
            (root / name).parent.mkdir(exist_ok=True)
        data = pattern(name, rng.randint(lo, hi))
        (root / name).write_bytes(data)
        digests[name] = hashlib.sha256(data).hexdigest()
    return digests


def test_twenty_thousand_small_files_go_up_in_few_puts_and_come_back(make_s3_volume, moto_server, bucket):
    volume = make_s3_volume(moto_server.endpoint, bucket)
    volume.mount()
    puts_before = requests(moto_server, bucket, "PUT")
    digests = write_small_files(volume.path, 20_000, random.Random(1))
    sync_wait(volume.path)
    puts = requests(moto_server, bucket, "PUT") - puts_before
    assert puts * 20 <= len(digests), f"{puts} PUTs for {len(digests)} small files"
    assert poll_status(volume)["uploaded_packs"] >= 1

    volume.reload_from_s3()
    gets_before = requests(moto_server, bucket, "GET")
    assert_digests(volume.path, digests)  # in path order: the order they were packed in
    gets = requests(moto_server, bucket, "GET") - gets_before
    assert gets * 5 <= len(digests), f"{gets} GETs to read {len(digests)} packed files in their order"


def test_a_shuffled_read_of_packed_files_fetches_a_few_of_them_alone_then_their_pack(
        make_s3_volume, moto_server, bucket):
    """Ten packs of about sixty files read in a shuffled order: a pack the reader jumps about in
    is fetched whole and its members copied to NVMe, where the other reads find them; one read
    close after another is fetched whole and held. Either way, few files cost a request."""
    volume = make_s3_volume(moto_server.endpoint, bucket)
    volume.mount()
    digests = write_small_files(volume.path, 600, random.Random(2), lo=12_000, hi=20_000)
    sync_wait(volume.path)
    volume.reload_from_s3()
    names = sorted(digests)
    random.Random(3).shuffle(names)
    gets_before = requests(moto_server, bucket, "GET")
    wrong = [name for name in names if sha256_file(volume.path / name) != digests[name]]
    gets = requests(moto_server, bucket, "GET") - gets_before
    assert not wrong, f"{len(wrong)} of {len(names)} files read back wrong"
    assert gets <= len(names) // 4, f"{gets} GETs for {len(names)} files read in a shuffled order"
    assert poll_status(volume)["tiers"]["nvme"]["hits"] > 0, "no pack was promoted to NVMe"


def mutate(root: Path, rng: random.Random) -> None:
    """Overwrite, truncate, append to, unlink, rename and hard-link some of the files."""
    names = sorted(str(p.relative_to(root)) for p in root.rglob("f*"))
    for name in rng.sample(names, 60):
        path = root / name
        if not path.exists():
            continue
        action = rng.choice(["overwrite", "truncate", "append", "unlink", "rename", "link"])
        if action == "overwrite":
            path.write_bytes(pattern((name, "new"), rng.randint(1, 9000)))
        elif action == "truncate":
            os.truncate(path, rng.randint(0, path.stat().st_size))
        elif action == "append":
            with open(path, "ab") as f:
                f.write(pattern((name, "tail"), rng.randint(1, 5000)))
        elif action == "unlink":
            path.unlink()
        elif action == "rename":
            path.rename(path.with_name(path.name + ".moved"))
        else:
            os.link(path, path.with_name(path.name + ".link"))


def tree_digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_changes_to_packed_files_match_a_local_directory(make_s3_volume, moto_server, bucket, tmp_path):
    volume = make_s3_volume(moto_server.endpoint, bucket, writeback={"garbage_grace": 0.2})
    volume.mount()
    local = tmp_path / "local"
    local.mkdir()
    for root in (volume.path, local):
        write_small_files(root, 400, random.Random(4), hi=6000)
    sync_wait(volume.path)
    for root in (volume.path, local):
        mutate(root, random.Random(5))
    sync_wait(volume.path)
    volume.reload_from_s3()
    assert tree_digests(volume.path) == tree_digests(local)
    volume.umount()
    report = aifs_ok("fsck", "-c", str(volume.config))
    assert "clean" in report, report


def test_a_pack_is_deleted_once_every_file_in_it_is_gone(make_s3_volume, moto_server, bucket):
    volume = make_s3_volume(moto_server.endpoint, bucket, writeback={"garbage_grace": 0.2})
    volume.mount()
    write_small_files(volume.path, 200, random.Random(6), hi=4000)
    sync_wait(volume.path)
    assert object_sizes(moto_server, bucket), "nothing was uploaded"
    for folder in list(volume.path.iterdir()):
        shutil.rmtree(folder)
    wait_for(lambda: not object_sizes(moto_server, bucket), "the emptied packs to be deleted", every=0.2)


def object_sizes(server, bucket: str) -> dict[str, int]:
    """The volume's objects (the marker left out) with their sizes, listed, not read."""
    pages = server.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=PREFIX)
    return {entry["Key"]: entry["Size"] for page in pages for entry in page.get("Contents", ())
            if not entry["Key"].endswith(MARKER_NAME)}


def identities(root: Path) -> dict[str, tuple[int, int, int, int]]:
    """(inode, size, mtime, mode) of every file: what packing must leave as it is."""
    return {str(p.relative_to(root)): (p.stat().st_ino, p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_mode)
            for p in sorted(root.rglob("*")) if p.is_file()}


def unpacked_tree(volume, count: int, seed: int, hi: int, lo: int = 500, **packing: str) -> dict[str, str]:
    """`count` small files written with packing off and uploaded, one object each; the
    volume is left unmounted, its config packing again (with `packing` keys)."""
    volume.mount()
    digests = write_small_files(volume.path, count, random.Random(seed), lo=lo, hi=hi)
    sync_wait(volume.path)
    volume.umount()
    volume.setup.writeback = {"garbage_grace": 0.2, **packing}
    volume.write_config()
    return digests


def test_aifs_pack_moves_an_unpacked_tree_into_packs_in_path_order(make_s3_volume, moto_server, bucket):
    volume = make_s3_volume(moto_server.endpoint, bucket, writeback={"pack_below": 0, "garbage_grace": 0.2})
    digests = unpacked_tree(volume, 400, 7, hi=12000)
    assert len(object_sizes(moto_server, bucket)) == len(digests), "the files were uploaded packed already"
    volume.mount()
    before = identities(volume.path)

    out = aifs_ok("pack", str(volume.path))
    assert f"{len(digests)} files: {len(digests)} blocks" in out, out
    assert identities(volume.path) == before
    wait_for(lambda: len(object_sizes(moto_server, bucket)) <= 2, "the objects of packed files to go", every=0.2)
    assert "400 files: 0 blocks" in aifs_ok("pack", str(volume.path)), "a second run packed again"

    volume.reload_from_s3()
    gets_before = requests(moto_server, bucket, "GET")
    assert_digests(volume.path, digests)
    assert requests(moto_server, bucket, "GET") - gets_before <= 20
    assert identities(volume.path) == before
    volume.umount()
    assert "clean" in aifs_ok("fsck", "-c", str(volume.config))


def test_a_mostly_dead_pack_is_packed_anew_with_its_live_files(make_s3_volume, moto_server, bucket):
    volume = make_s3_volume(moto_server.endpoint, bucket, writeback={"garbage_grace": 0.2})
    volume.mount()
    digests = write_small_files(volume.path, 200, random.Random(8), lo=1000, hi=9000)
    sync_wait(volume.path)
    (first,) = object_sizes(moto_server, bucket).values()
    doomed = sorted(digests)[::4] + sorted(digests)[1::4] + sorted(digests)[2::4]
    for name in doomed:
        (volume.path / name).unlink()
        del digests[name]
    live_bytes = sum((volume.path / name).stat().st_size for name in digests)
    wait_for(lambda: list(object_sizes(moto_server, bucket).values()) == [live_bytes],
             f"the pack of {first} bytes to be replaced by one of the {live_bytes} still in use", every=0.2)
    volume.reload_from_s3()
    assert_digests(volume.path, digests)
    volume.umount()
    assert "clean" in aifs_ok("fsck", "-c", str(volume.config))


def test_a_mount_killed_while_aifs_pack_runs_loses_nothing(make_s3_volume, moto_server, bucket):
    volume = make_s3_volume(moto_server.endpoint, bucket, writeback={"pack_below": 0, "garbage_grace": 0.2})
    digests = unpacked_tree(volume, 3000, 9, hi=4000, pack_size="32KiB", pack_below="16KiB")  # many packs
    volume.mount()
    puts = requests(moto_server, bucket, "PUT")
    packing = subprocess.Popen([sys.executable, "-m", "aifs", "pack", "-j", "1", str(volume.path)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for(lambda: requests(moto_server, bucket, "PUT") > puts + 2, "aifs pack to have put packs", every=0.02)
    volume.kill9()
    out, _ = packing.communicate(timeout=60)
    assert packing.returncode != 0, f"aifs pack finished before the mount was killed: {out}"
    volume.mount()
    assert_digests(volume.path, digests)
    aifs_ok("pack", str(volume.path))
    volume.reload_from_s3()
    assert_digests(volume.path, digests)
    volume.umount()
    aifs_ok("gc", "-c", str(volume.config), "--delete")
    assert "clean" in aifs_ok("fsck", "-c", str(volume.config))


def test_a_mount_killed_while_it_uploads_packs_loses_nothing(make_s3_volume, moto_server, bucket):
    writeback = {"pack_size": "32KiB", "pack_below": "16KiB", "upload_bandwidth": "1MiB", "garbage_grace": 0.2}
    volume = make_s3_volume(moto_server.endpoint, bucket, writeback=writeback)  # many packs, slowly
    volume.mount()
    puts = requests(moto_server, bucket, "PUT")
    digests = write_small_files(volume.path, 3000, random.Random(4), hi=4000)  # every close acknowledged
    wait_for(lambda: requests(moto_server, bucket, "PUT") > puts + 2, "packs to go up", every=0.02)
    assert poll_status(volume)["pending_blocks"] > 0, "every pack was up before the kill"
    volume.kill9()
    volume.mount()
    assert_digests(volume.path, digests)
    sync_wait(volume.path)
    volume.reload_from_s3()
    assert_digests(volume.path, digests)
    volume.umount()
    aifs_ok("gc", "-c", str(volume.config), "--delete")
    assert "clean" in aifs_ok("fsck", "-c", str(volume.config))


class Readers:
    """Threads that read random files over and over, each against its digest, until stopped."""

    def __init__(self, root: Path, digests: dict[str, str], count: int = 4) -> None:
        self.root, self.digests = root, digests
        self.wrong: list[str] = []
        self.reads = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(count)]

    def _run(self, seed: int) -> None:
        rng = random.Random(seed)
        names = sorted(self.digests)
        while not self._stop.is_set():
            name = rng.choice(names)
            try:
                data = (self.root / name).read_bytes()
            except OSError as e:
                self.wrong.append(f"{name}: {e}")
                continue
            if hashlib.sha256(data).hexdigest() != self.digests[name]:
                self.wrong.append(f"{name}: wrong bytes")
            self.reads += 1

    def __enter__(self) -> "Readers":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


def test_packing_and_packing_anew_under_concurrent_readers(make_s3_volume, moto_server, bucket):
    volume = make_s3_volume(moto_server.endpoint, bucket, writeback={"pack_below": 0, "garbage_grace": 0.2})
    digests = unpacked_tree(volume, 600, 10, lo=3000, hi=3000, pack_size="64KiB", pack_below="16KiB")
    volume.wipe_local()
    volume.mount()
    kept = {name: digest for i, (name, digest) in enumerate(sorted(digests.items())) if i % 4 == 0}
    with Readers(volume.path, kept) as readers:
        aifs_ok("pack", str(volume.path))
        wait_for(lambda: len(object_sizes(moto_server, bucket)) < 100, "the objects of packed files to go", every=0.2)
        for name in sorted(set(digests) - set(kept)):
            (volume.path / name).unlink()  # every pack (files of one size) is left about three quarters dead
        live_bytes = sum((volume.path / name).stat().st_size for name in kept)
        wait_for(lambda: sum(object_sizes(moto_server, bucket).values()) == live_bytes,
                 "every pack to be packed anew with its live files alone", every=0.2)
    assert readers.reads > 100 and not readers.wrong, readers.wrong[:5]
    volume.reload_from_s3()
    assert_digests(volume.path, kept)
    volume.umount()
    assert "clean" in aifs_ok("fsck", "-c", str(volume.config))


def test_a_path_rule_keeps_its_files_out_of_packs_or_packs_larger_ones(make_s3_volume, moto_server, bucket):
    rules = [{"path": "/raw/**", "pack_below": 0}, {"path": "/big/**", "pack_below": "256KiB"}]
    volume = make_s3_volume(moto_server.endpoint, bucket, writeback={"pack_below": "64KiB"}, rules=rules)
    volume.mount()
    digests = {}
    for folder, size in (("raw", 4000), ("big", 200_002), ("rest", 4001), ("rest-big", 200_000)):
        (volume.path / folder).mkdir()
        for i in range(20):
            data = pattern(f"{folder}{i}", size)
            (volume.path / folder / f"f{i}").write_bytes(data)
            digests[f"{folder}/f{i}"] = hashlib.sha256(data).hexdigest()
    sync_wait(volume.path)
    sizes = list(object_sizes(moto_server, bucket).values())
    assert sizes.count(4000) == 20, "a file under /raw went into a pack"
    assert sizes.count(200_000) == 20, "a file of 200,000 bytes outside /big went into a pack"
    assert sizes.count(4001) + sizes.count(200_002) == 0, "a small file outside /raw or under /big went up alone"
    assert len(sizes) <= 40 + 4
    volume.reload_from_s3()
    assert_digests(volume.path, digests)
