"""`aifs fsck`: check a volume offline, and repair what can be repaired."""

import sys
from pathlib import Path

import click

from aifs.cli.common import EXIT_USAGE, config_option, fail, line_printer, load_or_exit, state_dir_option
from aifs.fsck import FsckError, run_fsck


@click.command()
@config_option
@state_dir_option
@click.option("--repair", is_flag=True, help="Fix what can be fixed; lost data stays reported.")
@click.option("--verify", is_flag=True, help="Also read every block and check its checksum (reads all data).")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per line: each finding, then {\"summary\": ...}.")
def fsck(config_path: Path | None, state_dir: Path | None, repair: bool, verify: bool, as_json: bool) -> None:
    """Check a volume that is not mounted: entries, orphans, link counts, blocks, counters.

    Prints one line per problem (kind, what is involved, what it means, whether --repair
    fixes it) and a summary. Exit status: 0 clean (with --repair: everything found was
    repaired), 1 problems remain, 2 the check could not run (bad config, no volume, mounted).
    """
    config = load_or_exit(config_path, state_dir)
    show = line_printer(as_json)
    try:
        summary = run_fsck(config, repair=repair, verify=verify, emit=show)
    except FsckError as e:
        fail(str(e), EXIT_USAGE)
    show(summary)
    sys.exit(summary.exit_code)
