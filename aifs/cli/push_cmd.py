"""`aifs push filter|mask|tokenize`: transform files where their blocks are (aifs.push)."""

import json
from collections.abc import Callable
from pathlib import Path

import click

from aifs.cli.common import EXIT_USAGE, fail
from aifs.cli.progress import Progress
from aifs.control.client import ControlError
from aifs.push import job, mask as mask_job, tokenize as tokenize_job
from aifs.push import filter as filter_job
from aifs.push.job import PushError, PushReport
from aifs.units import size


def _job_options(command: Callable) -> Callable:
    """SRC... --out DST and the options every push shares."""
    for option in reversed((
        click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path)),
        click.option("--out", required=True, type=click.Path(path_type=Path, file_okay=False),
                     help="Directory for the results (made if missing): DST/NAME for a file, the same "
                          "tree for a directory."),
        click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=job.DEFAULT_TIMEOUT,
                     show_default=True, help="Seconds one piece may take on a server before it is done here."),
        click.option("--workers", type=click.IntRange(min=1), default=job.WORKERS, show_default=True,
                     help="Pieces in flight at once."),
        click.option("--json", "as_json", is_flag=True, help="Print the report as JSON."),
    )):
        command = option(command)
    return command


def _run(start: Callable[..., PushReport], as_json: bool, **arguments: object) -> None:
    """Run one job with a progress bar (none with --json: stdout is the report's); its report,
    or a one-line error."""
    progress = Progress("push", 0)
    shown = {} if as_json else {"progress": lambda r: progress.show(r.bytes_in, r.total, _state(r)),
                                "note": progress.note}
    try:
        report = start(**shown, **arguments)
    except (PushError, ControlError, ValueError) as e:
        fail(str(e))
    except OSError as e:
        fail(f"{e.filename}: {e.strerror}" if e.filename else str(e))
    finally:
        progress.close()
    if as_json:
        click.echo(json.dumps(report.__dict__, indent=2))
    else:
        click.echo(f"{report.files} file{'' if report.files == 1 else 's'} written: {size(report.bytes_in)} in, "
                   f"{size(report.bytes_out)} out; {size(report.on_servers)} transformed on flash servers, "
                   f"{size(report.on_client)} here; {size(report.moved)} moved to and from the servers")


def _state(report: PushReport) -> str:
    return (f"{size(report.bytes_in)}/{size(report.total)}, {size(report.on_servers)} on servers, "
            f"{size(report.moved)} moved")


@click.group()
def push() -> None:
    """Transform files where their blocks are: block servers run the transform their admin
    enabled and send back only the result; the client does the rest. Results are written as
    new files under --out, each in place only once complete."""


@push.command("filter")
@click.option("--where", "conditions", multiple=True, required=True, metavar="CONDITION",
              help="FIELD OP VALUE, e.g. 'lang == \"en\"' or 'meta.score >= 0.5' (OP: == != < <= > >=); "
                   "repeat: every one must hold.")
@_job_options
def filter_command(conditions: tuple[str, ...], sources: tuple[Path, ...], out: Path, timeout: float,
                   workers: int, as_json: bool) -> None:
    """Keep the JSON Lines records of SRC... that meet every --where condition."""
    _run(filter_job, as_json, sources=sources, out=out, where=conditions, timeout=timeout, workers=workers)


@push.command("mask")
@click.option("--pattern", "patterns", multiple=True, default=("email", "phone"), show_default=True,
              help="A pattern's name: built in are email and phone; repeat for several.")
@click.option("--patterns-file", type=click.Path(path_type=Path, dir_okay=False),
              help="A TOML file of more named patterns (the same file the servers register).")
@_job_options
def mask_command(patterns: tuple[str, ...], patterns_file: Path | None, sources: tuple[Path, ...], out: Path,
                 timeout: float, workers: int, as_json: bool) -> None:
    """Replace every match of the named patterns in SRC... with the pattern's placeholder."""
    _run(mask_job, as_json, sources=sources, out=out, patterns=patterns, patterns_file=patterns_file,
         timeout=timeout, workers=workers)


@push.command("tokenize")
@click.option("--tokenizer", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="A Hugging Face `tokenizers` JSON file.")
@click.option("--field", default="text", show_default=True, help="The JSON field that holds a record's text.")
@click.option("--lines", is_flag=True, help="Tokenize each whole line as text (not JSON).")
@_job_options
def tokenize_command(tokenizer: Path, field: str, lines: bool, sources: tuple[Path, ...], out: Path,
                     timeout: float, workers: int, as_json: bool) -> None:
    """Each record of SRC... as one line: the JSON list of its token ids."""
    if lines and field != "text":
        fail("--lines tokenizes whole lines; it takes no --field", EXIT_USAGE)
    _run(tokenize_job, as_json, sources=sources, out=out, tokenizer=tokenizer, field=None if lines else field,
         timeout=timeout, workers=workers)


if __name__ == "__main__":
    push()
