"""`aifs status` and `aifs sync`: ask a running mount over its control channel."""

import json
import os
import time
from pathlib import Path

import click

from aifs.cli.common import EXIT_USAGE, fail
from aifs.cli.progress import Progress
from aifs.cli.tier_status import health_problem, status_lines
from aifs.units import size
from aifs.control.client import ControlClient, ControlError


def ask(path: Path, op: str, **args) -> object:
    """The mount's answer to one request about `path`; exits with its one-line error otherwise."""
    try:
        return ControlClient.for_path(path).call(op, **args)
    except ControlError as e:
        fail(str(e))


@click.command()
@click.option("--wait", is_flag=True, help="Block until everything under the paths is in the durable tier.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="With --wait: give up after SECONDS (exit 1), saying what is still pending.")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
def sync(wait: bool, timeout: float | None, paths: tuple[Path, ...]) -> None:
    """Report (and with --wait, finish) the uploads of everything under PATHS.

    While waiting it shows the bytes uploaded and pending, and says so while the durable
    tier is unreachable.
    """
    if timeout is not None and not wait:
        fail("--timeout bounds the wait of --wait; give both, or neither", EXIT_USAGE)
    deadline = None if timeout is None else time.monotonic() + timeout
    for path in paths:
        inodes = [os.stat(path).st_ino]
        report = ask(path, "sync", inodes=inodes)
        pending = f"{report['files']} files, {report['pending_blocks']} blocks ({size(report['pending_bytes'])})"
        if not wait:
            click.echo(f"{path}: {pending} pending{_unreachable(report['durable'])}")
            continue
        if report["pending_blocks"]:
            _wait_uploaded(path, inodes, report["pending_bytes"], deadline, timeout)
        click.echo(f"{path}: {pending} were pending, now uploaded")


def _wait_uploaded(path: Path, inodes: list[int], total: int, deadline: float | None, timeout: float | None) -> None:
    """Ask again and again (each request waits a moment on the mount) until nothing under
    `path` is pending, showing progress; exits 1 at `deadline`."""
    progress = Progress(f"sync {path}", total)
    problem = None
    try:
        for report in ControlClient.for_path(path).sync_reports(inodes):
            total = max(total, report["pending_bytes"])
            uploaded = total - report["pending_bytes"]
            pending = f"{report['pending_blocks']} blocks ({size(report['pending_bytes'])})"
            progress.show(uploaded, total, f"{size(uploaded)} uploaded, {pending} pending",
                          last=not report["pending_blocks"])
            problem = _note_durable(progress, report["durable"], problem)
            if report["pending_blocks"] and deadline is not None and time.monotonic() >= deadline:
                fail(f"{path}: gave up after {timeout:g} s; {pending} still pending upload"
                     f"{_unreachable(report['durable'])}")
    except ControlError as e:
        fail(str(e))
    finally:
        progress.close()


def _unreachable(durable: dict) -> str:
    """The end of a line that says the durable tier is unreachable and why, while it is."""
    problem = health_problem(durable)
    return f"; {durable['tier']} is {problem}" if problem else ""


def _note_durable(progress: Progress, durable: dict, was: str | None) -> str | None:
    """Say when the durable tier becomes unreachable (and why) or answers again; the problem now."""
    problem = health_problem(durable)
    if problem and not was:
        progress.note(f"{durable['tier']} is {problem}; uploads resume when it answers")
    elif was and not problem:
        progress.note(f"{durable['tier']} answers again")
    return problem


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
def status(as_json: bool, path: Path) -> None:
    """Tiers (with their health), uploads and hit counts of the mount holding PATH; for a
    file, its upload state."""
    if path.is_file():
        report = ask(path, "file_state", ino=os.stat(path).st_ino)
        lines = [f"{path}: {report['state']}, {report['pending_blocks']} blocks "
                 f"({size(report['pending_bytes'])}) pending, {size(report['unsealed_bytes'])} unsealed"]
    else:
        report = ask(path, "status")
        lines = status_lines(report)
    click.echo(json.dumps(report, indent=2) if as_json else "\n".join(lines))
