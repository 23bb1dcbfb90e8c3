"""`aifs status` and `aifs sync`: ask a running mount over its control channel."""

import json
import os
from pathlib import Path

import click
from tqdm import tqdm

from aifs.cli.common import fail
from aifs.cli.tier_status import tier_status_lines
from aifs.control.client import ControlClient, ControlError


def _human(nbytes: float) -> str:
    return tqdm.format_sizeof(nbytes, "B", 1024)


def _ask(path: Path, op: str, **args) -> object:
    try:
        return ControlClient.for_path(path).call(op, **args)
    except ControlError as e:
        fail(str(e))


@click.command()
@click.option("--wait", is_flag=True, help="Block until everything under the paths is in the durable tier.")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
def sync(wait: bool, paths: tuple[Path, ...]) -> None:
    """Report (and with --wait, finish) the uploads of everything under PATHS."""
    for path in paths:
        report = _ask(path, "sync", inodes=[os.stat(path).st_ino], wait=wait)
        done = "uploaded" if wait else "pending"
        click.echo(f"{path}: {report['files']} files, {report['pending_blocks']} blocks "
                   f"({_human(report['pending_bytes'])}) were pending" + (f", now {done}" if wait else ""))


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
def status(as_json: bool, path: Path) -> None:
    """Tiers, uploads and hit counts of the mount holding PATH; for a file, its upload state."""
    if path.is_file():
        report = _ask(path, "file_state", ino=os.stat(path).st_ino)
        lines = [f"{path}: {report['state']}, {report['pending_blocks']} blocks "
                 f"({_human(report['pending_bytes'])}) pending, {_human(report['unsealed_bytes'])} unsealed"]
    else:
        report = _ask(path, "status")
        lines = _status_lines(report)
    click.echo(json.dumps(report, indent=2) if as_json else "\n".join(lines))


def _status_lines(report: dict) -> list[str]:
    lines = [f"volume {report['state_dir']}: {report['open_files']} open files"]
    for name, tier in report["tiers"].items():
        lines.append(f"  {name:<9} {_human(tier['used']):>9} of {_human(tier['capacity']):>9}"
                     f"  {tier['hits']} hits, {_human(tier['bytes_read'])} read")
    lines.append(f"  uploads   {report['pending_blocks']} blocks ({_human(report['pending_bytes'])}) pending, "
                 f"{report['uploaded_blocks']} uploaded ({_human(report['uploaded_bytes'])}, "
                 f"{_human(report['upload_rate'])}/s)")
    return lines + tier_status_lines(report)
