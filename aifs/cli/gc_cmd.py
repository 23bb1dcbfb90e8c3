"""`aifs gc`: find, and with --delete remove, objects in the durable tier that nothing uses."""

import sys
from pathlib import Path

import click

from aifs.cli.common import EXIT_USAGE, config_option, fail, line_printer, load_or_exit, state_dir_option
from aifs.gc import GcError, run_gc


@click.command()
@config_option
@state_dir_option
@click.option("--delete", is_flag=True, help="Remove the unreferenced objects (default: only report them).")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per line: each stray object, then {\"summary\": ...}.")
def gc(config_path: Path | None, state_dir: Path | None, delete: bool, as_json: bool) -> None:
    """Find objects in the durable tier (S3 bucket or object store) that no block ref, queued
    upload or retired block names, and report their count and size; --delete removes them.

    Runs offline: the volume must not be mounted (gc takes the volume lock, as fsck does).
    Blocks retired by overwrite or unlink are left to the mount, which deletes them after
    writeback.garbage_grace; run `aifs fsck --repair` first so that block refs of lost
    inodes are dropped and their objects count as unreferenced. Exit status: 0 done,
    1 some object could not be deleted, 2 gc could not run.
    """
    config = load_or_exit(config_path, state_dir)
    show = line_printer(as_json)
    try:
        report = run_gc(config, delete=delete, emit=show)
    except GcError as e:
        fail(str(e), EXIT_USAGE)
    show(report)
    sys.exit(report.exit_code)
