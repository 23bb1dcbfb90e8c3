"""Helpers for the unit tests: a MetaEngine, tiers and FileData in temporary
directories, driven directly (no FUSE, no mount)."""

from __future__ import annotations

import errno
import functools
import random
import stat
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

from aifs.config.models import WritebackConfig
from aifs.errors import FsError
from aifs.meta import MetaEngine
from aifs.meta.attrs import BlockRef
from aifs.meta.engine import ROOT_INO
from aifs.tiers.checksum import checksum
from aifs.tiers.manager import TierManager
from aifs.tiers.nvme import NvmeTier
from aifs.tiers.objstore import LocalObjectStore
from aifs.tiers.ram import RamTier
from aifs.vfs.filedata import FileData
from aifs.vfs.openfile import OpenFile, OpenFiles
from aifs.vfs.writeback import Uploader

BS = 64 << 10
SHARDS = 4
ROOT = ROOT_INO
FILE = stat.S_IFREG | 0o644
BIG = 1 << 30
FAR_FUTURE = 1 << 62  # a `now_ns` after every garbage grace period


# -- generic ---------------------------------------------------------------


@contextmanager
def fs_error(code: int):
    """Expect an FsError carrying exactly `code`."""
    with pytest.raises(FsError) as info:
        yield info
    assert info.value.errno == code, (
        f"expected {errno.errorcode[code]}, got {errno.errorcode.get(info.value.errno)}: {info.value}"
    )


def trio_test(fn):
    """Run an `async def` test under trio.run (pytest-trio is not installed)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return trio.run(functools.partial(fn, *args, **kwargs))

    return wrapper


def open_writer(files: OpenFiles, ino: int = 1) -> OpenFile:
    """A file in `files` that a handle has written to and keeps open: writers are at work."""
    of = files.acquire(ino, 0)
    files.wrote(of)
    return of


def never_open(_ino: int) -> bool:
    return False


def always_open(_ino: int) -> bool:
    return True


# -- metadata --------------------------------------------------------------


class Engines:
    """Opens, reopens and finally closes the MetaEngine of one directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.current: MetaEngine | None = None

    def open(self, block_size: int = BS, shards: int = SHARDS) -> MetaEngine:
        assert self.current is None, "close the engine before opening it again"
        self.current = MetaEngine.open(self.path, shards, block_size)
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None

    def reopen(self, block_size: int = BS) -> MetaEngine:
        self.close()
        return self.open(block_size)


@pytest.fixture
def engines(tmp_path):
    box = Engines(tmp_path / "meta")
    yield box
    box.close()


def mkfile(meta: MetaEngine, name: bytes, parent: int = ROOT, mode: int = 0o644, **kw) -> int:
    return meta.create(parent, name, stat.S_IFREG | mode, kw.pop("uid", 0), kw.pop("gid", 0), **kw)[0]


def mkdir(meta: MetaEngine, name: bytes, parent: int = ROOT, mode: int = 0o755, **kw) -> int:
    return meta.create(parent, name, stat.S_IFDIR | mode, kw.pop("uid", 0), kw.pop("gid", 0), **kw)[0]


def names(meta: MetaEngine, directory: int = ROOT) -> list[bytes]:
    return [name for name, _ in meta.readdir(directory)]


def entry(meta: MetaEngine, parent: int, name: bytes) -> int:
    return meta.lookup(parent, name)[0]


def nlink(meta: MetaEngine, ino: int) -> int:
    return meta.getattr(ino).nlink


def ref(block_id: int, length: int = 1000) -> BlockRef:
    return BlockRef(block_id, 0, length, 0)


# -- tiers -----------------------------------------------------------------


def noise(size: int, seed: int = 0) -> bytes:
    """Reproducible random bytes: position-sensitive content for read/write checks."""
    return random.Random(seed).randbytes(size)


def block(seed: int, size: int = 1024) -> bytes:
    """Distinct, recognisable bytes for block `seed`."""
    return bytes([seed & 0xFF]) * size


class Watched:
    """A tier wrapper that counts `get` calls per block id and can make them slow."""

    def __init__(self, tier, delay: float = 0.0) -> None:
        self._tier = tier
        self.delay = delay
        self.gets: dict[int, int] = {}

    def get(self, block_id: int, **options):
        self.gets[block_id] = self.gets.get(block_id, 0) + 1
        if self.delay:
            time.sleep(self.delay)
        return self._tier.get(block_id, **options)

    def __getattr__(self, name):
        return getattr(self._tier, name)


def make_tiers(root: Path, ram: int = BIG, nvme: int = BIG, cold_delay: float = 0.0,
               nvme_delay: float = 0.0) -> TierManager:
    """RAM, NVMe and a local object store under `root`; cold and NVMe gets are Watched."""
    return TierManager(
        RamTier(ram),
        Watched(NvmeTier(root / "nvme", nvme), nvme_delay),
        Watched(LocalObjectStore(root / "cold", BIG), cold_delay),
    )


@pytest.fixture
def tiers_factory(tmp_path):
    """make_tiers in a fresh folder each call; NVMe segment files are closed at teardown."""
    made: list[TierManager] = []

    def factory(**sizes) -> TierManager:
        made.append(make_tiers(tmp_path / f"tiers{len(made)}", **sizes))
        return made[-1]

    yield factory
    for tiers in made:
        tiers.nvme.close()


def in_cold_only(tiers: TierManager, block_id: int, data: bytes) -> int:
    """Store `data` as `block_id` in the cold tier only; returns its checksum."""
    tiers.cold.put(block_id, data)
    return checksum(data)


# -- file data -------------------------------------------------------------


class Files:
    """FileData over a real MetaEngine and real tiers, with small conveniences."""

    def __init__(self, meta: MetaEngine, tiers: TierManager) -> None:
        self.meta = meta
        self.tiers = tiers
        self.staged: list[int] = []  # ids of what FileData handed to the uploader, in order
        self.data = FileData(meta, tiers, lambda ino, refs: self.staged.extend(r.block_id for r in refs))
        self.bs = meta.block_size

    def open_new(self, name: bytes) -> OpenFile:
        return OpenFile(mkfile(self.meta, name), 0)

    def size(self, ino: int) -> int:
        return self.meta.getattr(ino).size

    async def contents(self, ino: int, of: OpenFile | None = None) -> bytes:
        """The whole file as a reader sees it (live size when open, stored size otherwise)."""
        size = of.size if of is not None else self.size(ino)
        return await self.data.read(ino, of, size, 0, size + 1)

    async def write_sealed(self, name: bytes, content: bytes) -> OpenFile:
        of = self.open_new(name)
        await self.data.write(of, 0, content)
        await self.data.seal(of)
        return of

    async def small_files(self, count: int) -> tuple[list[OpenFile], list[BlockRef]]:
        """`count` sealed files f0, f1, ... of 1,000, 2,000, ... bytes, and their blocks in close order."""
        sealed = [await self.write_sealed(f"f{i}".encode(), noise(1000 * (i + 1), i)) for i in range(count)]
        return sealed, [ref for of in sealed for ref in self.meta.all_block_refs(of.ino).values()]


@pytest.fixture
def files_factory(engines, tiers_factory):
    """Files over the test's MetaEngine (formatted with `block_size`) and fresh tiers."""

    def factory(block_size: int = BS, **tier_sizes) -> Files:
        return Files(engines.open(block_size), tiers_factory(**tier_sizes))

    return factory


@pytest.fixture
def files(files_factory) -> Files:
    return files_factory()


async def upload_packed(files: Files, refs: list[BlockRef]) -> Uploader:
    """Upload these blocks, packed without waiting for more, until recorded (or fail the test);
    the uploader."""
    uploader = Uploader(files.meta, files.tiers, OpenFiles(), WritebackConfig(pack_wait=0))
    uploader.enqueue(refs)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(uploader.run)
        with trio.fail_after(10):
            await uploader.wait_uploaded([ref.block_id for ref in refs])
        nursery.cancel_scope.cancel()
    return uploader
