"""`aifs freeze` and `aifs thaw`: make a tree immutable, so every node caches it without
asking again, or let it change once more."""

import os
from pathlib import Path

import click

from aifs.cli.admin_cmd import ask

_PATHS = click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))


def _apply(paths: tuple[Path, ...], frozen: bool) -> None:
    for path in paths:
        report = ask(path, "freeze", inodes=[os.stat(path).st_ino], frozen=frozen)
        click.echo(f"{path}: {report['inodes']} inodes {'frozen' if frozen else 'thawed'}")


@click.command()
@_PATHS
def freeze(paths: tuple[Path, ...]) -> None:
    """Freeze the trees at PATHS: writes, creates, renames and removals in them fail with EROFS
    until they are thawed, and every node caches them without revalidation. Freeze a tree that
    nothing is writing: a writer that still holds a file open fails at its close."""
    _apply(paths, True)


@click.command()
@_PATHS
def thaw(paths: tuple[Path, ...]) -> None:
    """Thaw the trees at PATHS: they can change again, and every node revalidates them."""
    _apply(paths, False)
