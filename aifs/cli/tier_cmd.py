"""`aifs pin`, `aifs unpin` and `aifs warmup`: place data in a tier of a running mount."""

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click

from aifs.cli.admin_cmd import _ask, _human
from aifs.cli.common import fail
from aifs.cli.warmup_progress import WarmupProgress
from aifs.control.client import ControlClient, ControlError

BATCH_FILES = 32
BATCH_BYTES = 64 << 20

TIERS = click.Choice(["ram", "nvme"])
PATHS = click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))


@click.command()
@click.option("--tier", type=TIERS, required=True, help="The tier the files must stay in.")
@PATHS
def pin(tier: str, paths: tuple[Path, ...]) -> None:
    """Keep the files under PATHS in TIER until unpinned, across restarts; loads them now."""
    for path in paths:
        report = _ask(path, "pin", inodes=[os.stat(path).st_ino], tier=tier)
        click.echo(f"{path}: {report['files']} files pinned to {tier} "
                   f"({_human(report['loaded_bytes'])} loaded, {_human(report['warm_bytes'])} already there)")


@click.command()
@PATHS
def unpin(paths: tuple[Path, ...]) -> None:
    """Let the files under PATHS be evicted again."""
    for path in paths:
        report = _ask(path, "unpin", inodes=[os.stat(path).st_ino])
        click.echo(f"{path}: {report['unpinned']} of {report['files']} files unpinned")


def _files(path: Path) -> Iterator[tuple[int, int]]:
    """(inode, size) of every regular file at or below `path`."""
    if not path.is_dir():
        st = path.stat()
        yield st.st_ino, st.st_size
        return
    for root, _, names in os.walk(path):
        for name in names:
            st = os.stat(os.path.join(root, name), follow_symlinks=False)
            if st.st_mode & 0o170000 == 0o100000:
                yield st.st_ino, st.st_size


def _batches(files: list[tuple[int, int]]) -> Iterator[list[tuple[int, int]]]:
    """Few control calls for many small files, yet progress that moves for large ones."""
    batch, nbytes = [], 0
    for ino, size in files:
        if batch and (len(batch) >= BATCH_FILES or nbytes + size > BATCH_BYTES):
            yield batch
            batch, nbytes = [], 0
        batch.append((ino, size))
        nbytes += size
    if batch:
        yield batch


@click.command()
@click.option("--tier", type=TIERS, default="nvme", show_default=True, help="The tier to load into.")
@click.option("--jobs", "-j", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Batches of files loaded at once.")
@PATHS
def warmup(tier: str, jobs: int, paths: tuple[Path, ...]) -> None:
    """Load the files and trees under PATHS into TIER ahead of training."""
    try:
        work = _work(paths)
    except ControlError as e:
        fail(str(e))
    progress = WarmupProgress(sum(len(b) for _, b in work), sum(s for _, b in work for _, s in b), tier)

    def run(item: tuple[ControlClient, list[tuple[int, int]]]) -> None:
        client, batch = item
        report = client.call("warmup", inodes=[ino for ino, _ in batch], tier=tier)
        progress.advance(len(batch), sum(size for _, size in batch), report["loaded_bytes"], report["warm_bytes"])

    try:
        with ThreadPoolExecutor(jobs) as pool:
            for _ in pool.map(run, work):
                pass
    except ControlError as e:
        fail(str(e))
    click.echo(progress.summary())


def _work(paths: tuple[Path, ...]) -> list[tuple[ControlClient, list[tuple[int, int]]]]:
    """Batches of (inode, size), each with the control client of the mount holding them."""
    work = []
    for path in paths:
        client = ControlClient.for_path(path)
        work += [(client, batch) for batch in _batches(list(_files(path)))]
    return work


@click.group()
def tier_commands() -> None:
    """The commands of this module on their own (`python -m aifs.cli.tier_cmd`)."""


for _command in (pin, unpin, warmup):
    tier_commands.add_command(_command)

if __name__ == "__main__":
    tier_commands()
