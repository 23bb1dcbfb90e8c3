"""The checkpoint workload against S3: what aifs' write-back saves a training job, and what it costs.

8 writers released together, each writing 256 MiB in 4 MiB writes, fsync, close (the
`checkpoint` workload), measured four ways, with seconds until the last close returns
(how long the GPUs wait) and until the bytes are durable, and the CPU-seconds spent until
then on the cores the writers and clients run on:

    aifs-local   an aifs volume with ram, nvme and an s3 tier, files under a path with no
                 rule: close after NVMe staging; durable once `aifs sync --wait` returns
    aifs-beside  the same on a second volume whose uploads all run beside busy writers
                 (`writeback.uploads_beside_writers`), from the S3 tier's upload process
                 (`upload_process`); aifs-local's wait until the writers are done
    aifs-remote  the same volume, files under a `durability = "remote"` rule: close waits for S3
    boto3        the same bytes PUT straight to the same bucket, 8 threads, one PUT per 4 MiB
                 object (one per aifs block), the client configured as aifs' own
    local        a plain directory under BASE: fsync is the last word, so durable = close

The S3 endpoint is a moto server on 127.0.0.1 unless one is given; with `s3_own_core`
it runs on a core of its own, as if S3 were another machine. The disk here is
noisy (2x between runs), so the four alternate in every round, each round starting
one further along, and each cell is the median of the rounds, its column's range in the
note. One untimed boto3 pass goes first, so that no column pays for the S3 server's
memory growing to hold a checkpoint. Between runs the files are deleted, the volume's
garbage collector is waited for (NVMe back to where it was), caches are synced and the
machine is left alone for a few seconds, so one run's background work does not land in
the next.

The cpu and floor rows are there because the S3 server, the client and (for aifs) the
writers and the mount share this machine's cores: a column cannot be durable sooner than
its CPU-seconds over the core count (its floor), whatever the software does, and a goal
line says how far that is from boto3's time. With `s3_own_core` the server's core is left
out of both, so the floor is the client side's alone.
"""

import os
import shutil
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

from aifs.bench import checkpoint
from aifs.bench.measure import MachineCpu, MiB
from aifs.bench.scratch import BUCKET, S3Target, ScratchVolume, s3_errors, s3_target, scratch_root, table, tier
from aifs.bench.workload import BenchError, Context, Mode, Result, Results
from aifs.tiers.s3 import DELETE_BATCH

NAME = "checkpoint-s3"
COLUMNS = ("aifs-local", "aifs-beside", "aifs-remote", "boto3", "local")  # local last: the ratio column
ROUNDS = 3
PAUSE_S = 5.0
OBJECT_SIZE = 4 * MiB  # the volume's block size: aifs PUTs one object per block
BESIDE = 8  # aifs-beside's uploads beside the writers: all of the default upload_concurrency
GARBAGE_GRACE_S = 1.0
GARBAGE_TIMEOUT_S = 300.0

Timing = tuple[float, float, float, float]  # seconds until the last close, until durable; CPU-seconds; floor


def run(base: str, scale: float, progress: Callable[[str], None], s3_endpoint: str | None = None,
        bucket: str = BUCKET, s3_own_core: bool = False, rounds: int = ROUNDS, pause_s: float = PAUSE_S) -> Results:
    """Columns COLUMNS; rows close, durable, cpu and floor (medians)."""
    size = Context(base, scale, lambda: None).scaled(checkpoint.FILE_SIZE)
    with ExitStack() as stack:
        root = scratch_root(stack, base, NAME)
        target = s3_target(stack, root, s3_endpoint, bucket, s3_own_core)
        volume = ScratchVolume(root)
        mnt = stack.enter_context(volume.mounted(_config(volume, target, size)))
        (root / "beside").mkdir()
        beside = ScratchVolume(root / "beside")
        beside_mnt = stack.enter_context(beside.mounted(_config(beside, target.sibling("beside"), size, BESIDE)))
        runs = {"aifs-local": partial(_on_aifs, volume, mnt / "local", scale),
                "aifs-beside": partial(_on_aifs, beside, beside_mnt / "local", scale),
                "aifs-remote": partial(_on_aifs, volume, mnt / "remote", scale),
                "boto3": partial(_boto3, target, size),
                "local": partial(_in_directory, root / "local", scale)}
        progress(f"warming the S3 endpoint up: {checkpoint.WRITERS} x {size >> 20} MiB, untimed")
        _boto3(target, size)  # a fresh server's memory grows once to hold a checkpoint: no column pays it
        timings: dict[str, list[Timing]] = {column: [] for column in COLUMNS}
        for i in range(rounds):
            for column in COLUMNS[i % len(COLUMNS):] + COLUMNS[:i % len(COLUMNS)]:
                progress(f"round {i + 1}/{rounds}: {column}, {checkpoint.WRITERS} x {size >> 20} MiB")
                timings[column].append(runs[column]())
                os.sync()
                time.sleep(pause_s)
        return {column: _summary(timings[column]) for column in COLUMNS}


def _config(volume: ScratchVolume, target: S3Target, size: int, beside: int = 0) -> Path:
    """Room on NVMe for two checkpoints, so staging never waits; garbage collected soon after a
    delete; `beside` uploads beside busy writers, from the upload process if any."""
    nvme = 2 * checkpoint.WRITERS * size + 256 * MiB
    writeback = table("[writeback]", garbage_grace=GARBAGE_GRACE_S, uploads_beside_writers=beside)
    return volume.config("checkpoint", tier("ram", capacity=256 * MiB), tier("nvme", capacity=nvme),
                         target.tier(upload_process=beside > 0), writeback,
                         table("[[rules]]", path="/remote/**", durability="remote"))


def _in_directory(workdir: Path, scale: float) -> Timing:
    """The checkpoint workload in `workdir`, then its files deleted."""
    workdir.mkdir(exist_ok=True)
    with MachineCpu() as machine:
        close, durable = checkpoint.checkpoint(Context(str(workdir), scale, lambda: None))
    shutil.rmtree(workdir / "checkpoint")
    return close.value, durable.value, machine.cpu_s, machine.floor_s


def _on_aifs(volume: ScratchVolume, workdir: Path, scale: float) -> Timing:
    """The checkpoint in `workdir` on the volume, then waiting until its deleted blocks are gone."""
    used = volume.status()["tiers"]["nvme"]["used"]
    timing = _in_directory(workdir, scale)
    _wait_collected(volume, used)
    return timing


def _wait_collected(volume: ScratchVolume, used: int) -> None:
    """Deleted blocks leave every tier after the grace period: wait until NVMe is back to `used`."""
    deadline = time.monotonic() + GARBAGE_TIMEOUT_S
    while (now := volume.status()["tiers"]["nvme"]["used"]) > used:
        if time.monotonic() > deadline:
            raise BenchError(f"deleted checkpoint blocks not collected in {GARBAGE_TIMEOUT_S:.0f} s: "
                             f"NVMe holds {now} bytes, {used} before the run")
        time.sleep(0.5)


def _boto3(target: S3Target, size: int) -> Timing:
    """The checkpoint's bytes PUT by boto3 alone, one shard per thread, released together."""
    client = target.client()
    chunk = os.urandom(min(OBJECT_SIZE, size))
    prefix = target.sibling("boto3").prefix
    shards = [[f"{prefix}rank{rank}/{i:04d}" for i in range(-(-size // OBJECT_SIZE))]
              for rank in range(checkpoint.WRITERS)]
    with MachineCpu() as machine:
        seconds = checkpoint.all_at_once([partial(_put_shard, client, target.bucket, keys, size, chunk)
                                          for keys in shards]) / 1e9
    _delete(client, target.bucket, [key for keys in shards for key in keys])
    return seconds, seconds, machine.cpu_s, machine.floor_s


def _put_shard(client: Any, bucket: str, keys: list[str], size: int, chunk: bytes) -> None:
    for key, offset in zip(keys, range(0, size, len(chunk))):
        with s3_errors(f"PUT s3://{bucket}/{key}"):
            client.put_object(Bucket=bucket, Key=key, Body=chunk[: size - offset])


def _delete(client: Any, bucket: str, keys: list[str]) -> None:
    for i in range(0, len(keys), DELETE_BATCH):
        objects = [{"Key": key} for key in keys[i:i + DELETE_BATCH]]
        with s3_errors(f"deleting {len(objects)} objects from s3://{bucket}"):
            client.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})


def _summary(timings: list[Timing]) -> dict[str, Result]:
    """Medians of the rounds, the ranges in one note."""
    closes, durables, cpus, floors = zip(*timings)
    note = (f"{len(timings)} round(s): close {min(closes):.2f}-{max(closes):.2f} s, "
            f"durable {min(durables):.2f}-{max(durables):.2f} s, cpu {min(cpus):.1f}-{max(cpus):.1f} s")
    return {"close": Result(statistics.median(closes), "s", note),
            "durable": Result(statistics.median(durables), "s", note),
            "cpu": Result(statistics.median(cpus), "cpu-s", note),
            "floor": Result(statistics.median(floors), "s", note)}


def goals(results: Results) -> list[str]:
    """aifs-local must close about as fast as a local disk, and be durable in S3 no later than
    boto3 alone; then the least time its CPU-seconds allow on the cores it had, and what
    aifs-beside trades."""
    aifs, beside, local, boto3 = (results[c] for c in ("aifs-local", "aifs-beside", "local", "boto3"))
    floor = aifs["floor"].value
    return [f"aifs-local / local close: {aifs['close'].value / local['close'].value:.2f} (goal <= 1.2)",
            f"aifs-local / boto3 durable: {aifs['durable'].value / boto3['durable'].value:.2f} (goal <= 1.0)",
            f"aifs-local durable floor: {floor:.2f} s ({aifs['cpu'].value:.1f} cpu-s over the cores it had), "
            f"{floor / boto3['durable'].value:.2f} of boto3's durable (boto3's own floor: "
            f"{boto3['floor'].value / boto3['durable'].value:.2f})",
            f"aifs-beside ({BESIDE} uploads beside the writers, from the upload process): close / local "
            f"{beside['close'].value / local['close'].value:.2f}, durable / boto3 "
            f"{beside['durable'].value / boto3['durable'].value:.2f}"]


MODE = Mode(NAME, "8 x 256 MiB checkpoint on a local directory, on aifs over S3 (local and remote "
                  "durability) and PUT by boto3 alone: close and durable seconds", run, goals)
