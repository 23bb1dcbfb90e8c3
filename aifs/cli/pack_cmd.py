"""`aifs pack`: move the small files of existing trees into packs, in path or mtime order."""

import os
import stat
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import click

from aifs.batches import batches
from aifs.cli.common import fail
from aifs.cli.progress import Progress
from aifs.control.client import ControlClient, ControlError
from aifs.units import size

BATCH_FILES = 4096
BATCH_BYTES = 64 << 20  # whole packs per request, and a progress bar that moves


class _File(NamedTuple):
    path: str
    ino: int
    size: int
    mtime_ns: int


def _files(top: Path, unreadable: list[str]) -> Iterator[_File]:
    """Regular files at or below `top`, in path order (names sorted byte-wise at each level)."""
    if not top.is_dir():
        st = top.stat()
        yield _File(str(top), st.st_ino, st.st_size, st.st_mtime_ns)
        return
    for here, dirs, names in os.walk(top, onerror=lambda e: unreadable.append(f"{e.filename}: {e.strerror}")):
        dirs.sort(key=os.fsencode)
        for name in sorted(names, key=os.fsencode):
            path = os.path.join(here, name)
            try:
                st = os.lstat(path)
            except OSError as e:
                unreadable.append(f"{path}: {e.strerror}")
                continue
            if stat.S_ISREG(st.st_mode):
                yield _File(path, st.st_ino, st.st_size, st.st_mtime_ns)


@click.command()
@click.option("--order", type=click.Choice(["path", "mtime"]), default="path", show_default=True,
              help="The order files are packed in, which an epoch reading in that order streams.")
@click.option("--jobs", "-j", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Batches of files packed at once.")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
def pack(order: str, jobs: int, paths: tuple[Path, ...]) -> None:
    """Move the small files under PATHS into packs, in ORDER.

    Names, inodes, attributes and bytes do not change, and the files may be read (and
    written) meanwhile. Files already packed, or not yet uploaded, are passed over, so an
    interrupted run is finished by running it again.
    """
    unreadable: list[str] = []
    work = []
    for top in paths:
        seen: set[int] = set()  # a file with several names is packed at its first
        files = [f for f in _files(top, unreadable) if not (f.ino in seen or seen.add(f.ino))]
        if order == "mtime":
            files.sort(key=lambda f: (f.mtime_ns, f.path))
        try:
            client = ControlClient.for_path(top)
        except ControlError as e:
            fail(str(e))
        work += [(client, batch) for batch in batches(files, lambda f: f.size, BATCH_FILES, BATCH_BYTES)]
    _run(work, jobs)
    for entry in unreadable[:20]:
        click.echo(f"aifs: could not read {entry}", err=True)
    if unreadable:
        fail(f"{len(unreadable)} entries could not be read and were not packed")


class _Tally:
    """What the batches packed so far, shown as they finish (from several threads)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.progress = Progress("packing", total)
        self.bytes = self.files = self.blocks = self.packs = self.moved = 0
        self.skipped: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, report: dict, batch: list[_File]) -> None:
        with self._lock:
            self.bytes += sum(f.size for f in batch)
            self.files += len(batch)
            self.blocks += report["blocks"]
            self.packs += report["packs"]
            self.moved += report["bytes"]
            for why, count in report["skipped"].items():
                self.skipped[why] = self.skipped.get(why, 0) + count
            self.progress.show(self.bytes, self.total, f"{self.files} files, {self.packs} packs")

    def summary(self) -> str:
        passed = ", ".join(f"{count} {why}" for why, count in sorted(self.skipped.items()))
        return (f"{self.files} files: {self.blocks} blocks ({size(self.moved)}) moved into {self.packs} packs"
                + (f"; blocks passed over: {passed}" if passed else ""))


def _run(work: list, jobs: int) -> None:
    tally = _Tally(sum(f.size for _, batch in work for f in batch))

    def one(item) -> None:
        client, batch = item
        tally.add(client.call("pack", inodes=[f.ino for f in batch]), batch)

    try:
        with ThreadPoolExecutor(jobs) as pool:
            list(pool.map(one, work))
    except ControlError as e:
        fail(str(e))
    finally:
        tally.progress.close()
    click.echo(tally.summary())
