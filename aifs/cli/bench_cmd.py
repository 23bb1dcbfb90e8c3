"""`aifs bench`: the same workloads on several directories (an aifs mount, a local disk...)."""

import os

import click

from aifs.bench import report, runner
from aifs.bench.metascale import parse_entries
from aifs.bench.registry import MODES, WORKLOADS
from aifs.bench.scratch import BUCKET
from aifs.bench.workload import BenchError


def _parse_only(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str] | None:
    """`--only a,b` -> ["a", "b"], rejecting names the registry does not know."""
    if value is None:
        return None
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in WORKLOADS]
    if unknown or not names:
        given = ", ".join(unknown) or "(none)"
        raise click.BadParameter(f"unknown workload {given}; choose from {', '.join(WORKLOADS)}")
    return names


def _distinct_dirs(
    ctx: click.Context, param: click.Parameter, paths: tuple[str, ...]
) -> tuple[str, ...]:
    """Two spellings of one directory would share a scratch directory and compare nothing."""
    real = [os.path.realpath(path) for path in paths]
    if len(set(real)) != len(real):
        raise click.BadParameter("each PATH must be a different directory")
    return paths


def _parse_entries(ctx: click.Context, param: click.Parameter, value: str | None) -> list[int] | None:
    """`--entries 100k,1M` -> [100000, 1000000]."""
    if value is None:
        return None
    try:
        return parse_entries(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def _mode_options(mode: str | None, given: dict[str, object]) -> dict[str, object]:
    """The options given that belong to `mode`; one that belongs to another mode is refused."""
    given = {name: value for name, value in given.items() if value is not None}
    for name in given:
        if mode is None or name not in MODES[mode].options:
            owners = ", ".join(f"--mode {m}" for m in sorted(MODES) if name in MODES[m].options)
            raise click.UsageError(f"--{name} is an option of {owners} only")
    return given


def _progress(message: str) -> None:
    click.echo(message, err=True)


@click.command()
@click.argument(
    "paths",
    nargs=-1,
    required=True,
    callback=_distinct_dirs,
    type=click.Path(exists=True, file_okay=False),
)
@click.option(
    "--scale",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Multiply file counts and sizes (e.g. 0.01 for a smoke test).",
)
@click.option(
    "--only",
    callback=_parse_only,
    metavar="NAME,...",
    help=f"Run only these workloads (prerequisites run unreported): {', '.join(WORKLOADS)}.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--mode", type=click.Choice(sorted(MODES)),
    help="Instead of the workloads, a mode that builds its own volumes under the first PATH and "
         "prints goal lines after its table: "
         + "; ".join(f"{name}: {MODES[name].summary}" for name in sorted(MODES)) + ".",
)
@click.option("--s3-endpoint", metavar="URL",
              help="With --mode: the S3 endpoint to use (AWS credential chain) instead of a moto server "
                   "started on 127.0.0.1.")
@click.option("--bucket", default=BUCKET, show_default=True, help="With --mode: the S3 bucket.")
@click.option("--s3-own-core", is_flag=True,
              help="With --mode: the moto server gets one core of its own and everything else the "
                   "others, as if S3 were another machine.")
@click.option("--nodes", type=click.IntRange(min=2), help="With --mode cluster: how many nodes mount each "
                                                           "shared volume (default 2).")
@click.option("--entries", callback=_parse_entries, metavar="N,...",
              help="With --mode meta-scale: the namespace sizes to build, e.g. 100k,1M,10M (the default).")
def bench(paths: tuple[str, ...], scale: float, only: list[str] | None, as_json: bool, mode: str | None,
          s3_endpoint: str | None, bucket: str, s3_own_core: bool, nodes: int | None,
          entries: list[int] | None) -> None:
    """Run the same file workloads on each PATH, one path after another, and compare them.

    Each PATH is an existing directory. The bench works in a fresh subdirectory,
    removed at the end:

    \b
        PATH/.aifs-bench-<pid>

    With --mode, the first PATH gets a scratch folder for the mode's volumes,
    servers and local copies instead (PATH/.aifs-bench-<mode>-*); modes need
    root and /dev/fuse. Cold results need root to drop the kernel's caches.
    Progress goes to stderr, results to stdout.
    """
    options = _mode_options(mode, {"nodes": nodes, "entries": entries})
    try:
        if mode is not None:
            results = MODES[mode].run(paths[0], scale, _progress, s3_endpoint=s3_endpoint, bucket=bucket,
                                      s3_own_core=s3_own_core, **options)
        else:
            results = runner.run(paths, only, scale, _progress)
    except (BenchError, OSError) as error:  # OSError: the scratch directory itself failed
        raise click.ClickException(str(error)) from error
    goals = MODES[mode].goals(results) if mode is not None else None
    ratio = MODES[mode].ratio if mode is not None else None
    click.echo(report.render(results, scale, as_json, goals, ratio))
