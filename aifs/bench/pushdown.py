"""Pushdown against the mount: a filter that keeps a tenth of JSON Lines files, run where the
blocks are (`aifs push filter`) and on the client over reads through the mount.

In a scratch folder under BASE it starts flash block servers on 127.0.0.1 that run the
filter, mounts a volume with ram, nvme, remote (two copies) and a local object store,
writes the files (1 GiB at scale 1; about one record in ten has lang "en"), and waits
until the servers hold every block. Each column then runs through a fresh mount with the
NVMe tier wiped, so that the blocks are on the flash servers only, as on a node that has
not read them yet:

    push   `aifs.push.filter`: the servers filter their blocks, the client joins the pieces
    mount  the files read through the mount and filtered on the client, the same code

Rows: bytes moved between the flash servers and the client (MiB; for the mount, what its
remote tier read; for push, the job's requests and answers plus what the mount read from
the servers meanwhile) and wall time (s), writing the result through the mount included.
The two results must be byte for byte the same, or the numbers are an error.

    python3 -m aifs.bench.pushdown BASE [--scale F] [--servers N] [--json]
"""

import json
import os
import random
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import click

import aifs.push
from aifs.bench import report
from aifs.bench.measure import GiB, MiB, Stopwatch
from aifs.bench.remote import REPLICAS, _wait_held as wait_held, flash_server
from aifs.bench.scratch import ScratchVolume, scratch_root, tier, tier_reads
from aifs.bench.workload import BenchError, Mode, Result, Results
from aifs.push.predicate import Condition
from aifs.push.transforms import Filter
from aifs.rdma.auth import Secret, write_secret_file

NAME = "pushdown"
TOTAL = 1 * GiB
FILES = 4
BLOCK = 4 * MiB
WHERE = ('lang == "en"',)
SEED = 5
POOL = 4096  # distinct records, repeated in random order
CHUNK_RECORDS = 2048  # written at once: a file overshoots its share by less than a chunk

Progress = Callable[[str], None]


def _records(rng: random.Random) -> list[bytes]:
    words = "data flows to compute where the blocks live and only results travel back".split()
    langs = ["en"] + ["de", "fr", "es", "it", "nl", "pl", "pt", "sv", "fi"]
    return [json.dumps({"id": i, "lang": langs[i % len(langs)], "score": round(rng.random(), 3),
                        "text": " ".join(rng.choices(words, k=rng.randint(10, 80)))}).encode() + b"\n"
            for i in range(POOL)]


def _write_files(mnt: Path, size: int) -> list[Path]:
    """FILES files of JSON Lines, `size` bytes in all (whole records)."""
    rng = random.Random(SEED)
    pool = _records(rng)
    paths = []
    for n in range(FILES):
        path = mnt / "raw" / f"part-{n}.jsonl"
        path.parent.mkdir(exist_ok=True)
        with open(path, "wb") as f:
            written = 0
            while written < size // FILES:
                chunk = b"".join(rng.choices(pool, k=CHUNK_RECORDS))
                written += f.write(chunk)
        paths.append(path)
    return paths


def _through_mount(mnt: Path, paths: list[Path]) -> None:
    """Read every file through the mount, filter it here, write the result through the mount."""
    transform = Filter([Condition.parse(w) for w in WHERE])
    out = mnt / "via-mount"
    out.mkdir(exist_ok=True)
    for path in paths:
        (out / path.name).write_bytes(transform(path.read_bytes()))


def _pushed(mnt: Path, paths: list[Path]) -> int:
    """The job's bytes moved."""
    return aifs.push.filter(paths, mnt / "pushed", where=WHERE).moved


def _column(volume: ScratchVolume, config: Path, paths: list[str], run: Callable[[Path, list[Path]], int | None],
            progress: Progress, name: str) -> dict[str, Result]:
    volume.wipe_nvme()
    progress(f"{name}: filtering")
    with volume.mounted(config) as mnt:
        before = volume.status()
        with Stopwatch() as wall:
            moved = run(mnt, [mnt / p for p in paths]) or 0
        mount_read = tier_reads(volume.status(), before).get("remote", 0)
        volume.sync(mnt)  # the result must outlive the NVMe tier, wiped before the next column
    progress(f"{name}: {moved / MiB:.1f} MiB moved by the job, {mount_read / MiB:.1f} MiB read by the mount")
    moved += mount_read
    return {"moved": Result(moved / MiB, "MiB", label="bytes-moved"), "wall": Result(wall.ns / 1e9, "s", label="wall")}


def _same_results(volume: ScratchVolume, config: Path, paths: list[str]) -> None:
    with volume.mounted(config) as mnt:
        for p in paths:
            name = Path(p).name
            if (mnt / "pushed" / name).read_bytes() != (mnt / "via-mount" / name).read_bytes():
                raise BenchError(f"{name}: the pushed filter's result differs from the client's")


def run(base: str, scale: float, progress: Progress, s3_endpoint: str | None = None, bucket: str = "",
        s3_own_core: bool = False, servers: int = 3) -> Results:
    """Columns push and mount; rows bytes-moved and wall."""
    size = max(FILES * BLOCK, round(TOTAL * scale))
    with ExitStack() as stack:
        root = scratch_root(stack, base, "pushdown")
        secret_file = root / "flash.secret"
        write_secret_file(secret_file)
        capacity = 2 * size * REPLICAS // servers + 256 * MiB
        addresses = [stack.enter_context(flash_server(root / f"flash{i}", capacity, "tcp", secret_file,
                                                      ("--transforms", "filter"))) for i in range(servers)]
        volume = ScratchVolume(root, BLOCK)
        config = volume.config("pushdown", tier("ram", capacity=256 * MiB), tier("nvme", capacity=2 * size + GiB),
                               tier("remote", servers=addresses, replicas=REPLICAS, transport="tcp",
                                    secret_file=str(secret_file)), tier("objstore"))
        progress(f"writing {size >> 20} MiB of JSON Lines in {BLOCK >> 20} MiB blocks")
        with volume.mounted(config) as mnt:
            paths = [str(p.relative_to(mnt)) for p in _write_files(mnt, size)]
            volume.sync(mnt)
            blocks = sum(-(-os.path.getsize(mnt / p) // BLOCK) for p in paths)
            wait_held(addresses, blocks * REPLICAS, Secret.from_file(secret_file))
        results = {"push": _column(volume, config, paths, _pushed, progress, "push"),
                   "mount": _column(volume, config, paths, _through_mount, progress, "mount")}
        _same_results(volume, config, paths)
        return results


def goals(results: Results) -> list[str]:
    """The issue's targets: at most 0.15x the bytes moved, and faster end to end."""
    push, mount = results["push"], results["mount"]
    moved = push["moved"].value / mount["moved"].value
    wall = push["wall"].value / mount["wall"].value
    return [f"push / mount bytes moved: {moved:.3f} (goal <= 0.15)", f"push / mount wall time: {wall:.2f} (goal < 1)"]


@click.command()
@click.argument("base", type=click.Path(exists=True, file_okay=False))
@click.option("--scale", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Multiply the data size (1 GiB).")
@click.option("--servers", type=click.IntRange(min=REPLICAS), default=3, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def main(base: str, scale: float, servers: int, as_json: bool) -> None:
    """Filter JSON Lines where the blocks are and through the mount; compare bytes moved and time.

    BASE is a directory on the local disk; the bench works in a scratch folder there, removed
    at the end. Needs root and /dev/fuse.
    """
    try:
        results = run(base, scale, lambda m: click.echo(m, err=True), servers=servers)
    except (BenchError, OSError, aifs.push.PushError) as error:
        raise click.ClickException(str(error)) from error
    click.echo(report.render(results, scale, as_json, goals(results)))


MODE = Mode(NAME, "data-cleaning filter pushed to the flash servers vs through the mount", run, goals)


if __name__ == "__main__":
    main()
