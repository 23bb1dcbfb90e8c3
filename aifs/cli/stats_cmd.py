"""`aifs stats`: what a running mount is doing, as rates redrawn every interval, or as JSON.

Each figure is a rate over one interval: the command asks the mount for its counters
(the `stats` control operation) once per interval and divides their growth by the time
that passed, so even `--once` takes two samples, one interval apart.
"""

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import click

from aifs.cli.common import EXIT_USAGE, fail
from aifs.cli.stats_rates import rates
from aifs.cli.stats_view import frame_lines
from aifs.control.client import ControlClient, ControlError, mount_of

ANSWER_TIMEOUT_S = 10.0  # a mount that does not answer a sample in this long is reported, not waited on


def _client(path: Path) -> tuple[ControlClient, Path]:
    """The control channel of the aifs mount holding `path`, and its mountpoint; a path on no
    aifs mount is a usage error."""
    try:
        entry = mount_of(path)
    except ControlError as e:
        fail(f"{e}; give a path on a mounted aifs volume", EXIT_USAGE)
    return ControlClient(entry.state_dir, ANSWER_TIMEOUT_S), entry.mountpoint


def _counters(client: ControlClient) -> dict:
    try:
        return client.call("stats")
    except ControlError as e:
        fail(str(e))


def samples(client: ControlClient, mountpoint: Path, interval: float) -> Iterator[dict]:
    """One sample of rates per interval, for ever; the first one interval after the start."""
    before = _counters(client)
    due = time.monotonic()
    while True:
        due += interval
        time.sleep(max(due - time.monotonic(), 0.0))
        after = _counters(client)
        yield {"mount": str(mountpoint), "time": round(time.time(), 3), **rates(before, after)}
        before = after


def _printer(as_json: bool) -> Callable[[dict], None]:
    """JSON, one object a line; or the table, redrawn in place on a terminal and one block
    after another (no escape codes) anywhere else."""
    if as_json:
        return lambda sample: click.echo(json.dumps(sample))
    on_terminal = sys.stdout.isatty()

    def redraw(sample: dict) -> None:
        lines = frame_lines(sample)
        if on_terminal:
            click.clear()
            lines.append("(Ctrl-C ends)")
        else:
            lines.append("")
        click.echo("\n".join(lines))

    return redraw


@click.command()
@click.option("--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True, metavar="SECONDS",
              help="Time between samples: every figure is a rate over one interval.")
@click.option("--once", is_flag=True, help="Print one sample (taken over one interval) and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print each sample as one line of JSON.")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
def stats(interval: float, once: bool, as_json: bool, path: Path) -> None:
    """FUSE requests per second and their latency, bytes read and hit ratio of each tier,
    uploads, and the health of S3, flash servers and peers, of the mount holding PATH;
    redrawn every interval until Ctrl-C."""
    client, mountpoint = _client(path)
    show = _printer(as_json)
    try:
        for sample in samples(client, mountpoint, interval):
            show(sample)
            if once:
                return
    except KeyboardInterrupt:
        return
