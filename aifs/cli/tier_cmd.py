"""`aifs pin`, `aifs unpin` and `aifs warmup`: place data in a tier of a running mount."""

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click

from aifs.batches import batches
from aifs.cli.admin_cmd import ask
from aifs.cli.common import fail
from aifs.cli.treewalk import TreeWalk
from aifs.units import size
from aifs.cli.warmup_progress import WarmupProgress
from aifs.control.client import ControlClient, ControlError

BATCH_FILES = 32
BATCH_BYTES = 64 << 20
SHOW_UNREADABLE = 20

TIERS = click.Choice(["ram", "nvme"])
PATHS = click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
Batch = list[tuple[int, int]]  # (inode, size) of some files
Work = list[tuple[ControlClient, Batch]]


@click.command()
@click.option("--tier", type=TIERS, required=True, help="The tier the files must stay in.")
@PATHS
def pin(tier: str, paths: tuple[Path, ...]) -> None:
    """Keep the files under PATHS in TIER until unpinned, across restarts; loads them now."""
    for path in paths:
        report = ask(path, "pin", inodes=[os.stat(path).st_ino], tier=tier)
        missed = f", {size(report['missed_bytes'])} found no room" if report["missed_bytes"] else ""
        click.echo(f"{path}: {report['files']} files pinned to {tier} "
                   f"({size(report['loaded_bytes'])} loaded, {size(report['warm_bytes'])} already there{missed})")


@click.command()
@PATHS
def unpin(paths: tuple[Path, ...]) -> None:
    """Let the files under PATHS be evicted again."""
    for path in paths:
        report = ask(path, "unpin", inodes=[os.stat(path).st_ino])
        click.echo(f"{path}: {report['unpinned']} of {report['files']} files unpinned")


@click.command()
@click.option("--tier", type=TIERS, default="nvme", show_default=True, help="The tier to load into.")
@click.option("--jobs", "-j", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Batches of files loaded at once.")
@PATHS
def warmup(tier: str, jobs: int, paths: tuple[Path, ...]) -> None:
    """Load the files and trees under PATHS into TIER ahead of training.

    Exits 1 when something could not be read, or did not fit in TIER: what is there
    at the end is checked, so files pushed out by later ones count as not fitting.
    """
    try:
        work, unreadable = _work(paths)
    except ControlError as e:
        fail(str(e))
    progress = WarmupProgress(sum(len(b) for _, b in work), sum(s for _, b in work for _, s in b), tier)

    def load(item: tuple[ControlClient, Batch]) -> None:
        client, batch = item
        report = client.call("warmup", inodes=[ino for ino, _ in batch], tier=tier)
        progress.advance(len(batch), sum(nbytes for _, nbytes in batch), report["loaded_bytes"],
                         report["warm_bytes"])

    def held(item: tuple[ControlClient, Batch]) -> dict:
        client, batch = item
        return client.call("resident", inodes=[ino for ino, _ in batch], tier=tier)

    try:
        with ThreadPoolExecutor(jobs) as pool:
            for _ in pool.map(load, work):
                pass
            residency = list(pool.map(held, work))
    except ControlError as e:
        fail(str(e))
    click.echo(progress.summary())
    _report_shortfall(tier, residency, unreadable)


def _report_shortfall(tier: str, residency: list[dict], unreadable: list[str]) -> None:
    """Say what the warmup could not do, and exit 1 if anything: entries that could not be
    read, and bytes the tier does not hold at the end."""
    for entry in unreadable[:SHOW_UNREADABLE]:
        click.echo(f"aifs: could not read {entry}", err=True)
    if len(unreadable) > SHOW_UNREADABLE:
        click.echo(f"aifs: ... and {len(unreadable) - SHOW_UNREADABLE} more entries could not be read", err=True)
    missing = sum(r["missing_bytes"] for r in residency)
    problems = []
    if missing:
        total = sum(r["bytes"] for r in residency)
        capacity = residency[0]["capacity"]
        problems.append(
            f"{size(missing)} of {size(total)} in {sum(r['missing_files'] for r in residency)} files did not fit "
            f"in the {tier} tier ({size(capacity)} capacity): they are read from the tiers below; "
            f"warm fewer files or use a larger tier")
    if unreadable:
        problems.append(f"{len(unreadable)} entries could not be read and were not warmed")
    if problems:
        fail("; ".join(problems))


def _work(paths: tuple[Path, ...]) -> tuple[Work, list[str]]:
    """Batches of (inode, size), each with the control client of the mount holding them, and
    the entries that could not be read."""
    work, unreadable = [], []
    for path in paths:
        client = ControlClient.for_path(path)
        walk = TreeWalk(path)
        work += [(client, batch) for batch in batches(walk, lambda file: file[1], BATCH_FILES, BATCH_BYTES)]
        unreadable += walk.unreadable
    return work, unreadable


@click.group()
def tier_commands() -> None:
    """The commands of this module on their own (`python -m aifs.cli.tier_cmd`)."""


for _command in (pin, unpin, warmup):
    tier_commands.add_command(_command)

if __name__ == "__main__":
    tier_commands()
