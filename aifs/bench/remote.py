"""Remote-tier reads beside local NVMe and the cold tier: a bench mode that builds its own volume.

The registry's workloads run on any directory through plain `os` calls, so they cannot
choose which tier holds a block. This mode can. In a scratch folder under BASE (the
local disk that plays NVMe) it starts flash block servers on 127.0.0.1 and a cold
tier (a loopback S3 endpoint, moto, unless one is given; or a local object store),
mounts an aifs volume with ram, nvme, remote and cold tiers (servers and mount sharing
a fresh secret), writes one file, waits
until the cold tier and the flash servers hold all of it, and then reads it through
fresh mounts, each time with the blocks in exactly one tier below RAM:

    nvme         remounted as is: NVMe holds every block, RAM none
    remote       NVMe wiped first: the blocks are only on the flash servers, which
                 keep them in their page cache as a server with RAM for its hot set does
    remote-cold  the same with the servers' page caches emptied: every read reaches their disks
    cold         NVMe wiped, mounted without the remote tier: only the cold tier has them

Each gets a sequential read of the file (MiB/s), and after another fresh mount one 4 KiB
pread at a random offset in every block, blocks in random order (p50/p99 µs): every
sample is its block's first touch, so it pays that tier's fetch (of the 64 KiB chunk
that holds the page). Before each mount the page cache of the node's data tiers (NVMe,
local object store) is emptied, and the flash servers' as the column says; the
metadata stays as warm as a serving mount's, since it costs every column alike. The
mount's own tier counters are checked after each read: a number measured on the wrong
tier is an error, never a result.

    python3 -m aifs.bench.remote BASE [--scale F] [--servers N] [--block-size SIZE]
                                      [--cold s3|objstore] [--s3-endpoint URL --bucket NAME] [--json]
"""

import os
import random
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path

import click

from aifs.bench import report
from aifs.bench.caches import evict_files
from aifs.bench.fileio import pread_latencies, read_rate, write_synced
from aifs.bench.measure import GiB, KiB, MiB, percentile
from aifs.bench.scratch import (BLOCK, BUCKET, ScratchVolume, check_source, child, free_port, s3_target,
                                scratch_root, tier)
from aifs.bench.workload import BenchError, Mode, Result, Results
from aifs.cli.flash_cmd import SIZE
from aifs.rdma.auth import Secret, write_secret_file
from aifs.rdma.tcp import TcpTransport
from aifs.rdma.transport import Address

NAME = "remote-tier"
FILE_SIZE = 1 * GiB
IO_SIZE = 4 * MiB
PAGE = 4 * KiB
REPLICAS = 2
SEED = 3
WARM_UP = "warm-up.bin"
WARM_UP_BLOCKS = 8  # enough for the warm-up reads to reach every server
HOLD_TIMEOUT_S = 300.0
OBJSTORE = tier("objstore")

Progress = Callable[[str], None]


def flash_server(root: Path, capacity: int, transport: str, secret_file: Path,
                 options: tuple[str, ...] = ()) -> AbstractContextManager[str]:
    """`options`: more `aifs flash serve` options."""
    port = free_port()
    argv = [sys.executable, "-m", "aifs", "flash", "serve", "--dir", str(root), "--capacity", str(capacity),
            "--listen", f"127.0.0.1:{port}", "--transport", transport, "--secret-file", str(secret_file),
            "--log-level", "warning", *options]
    return child("flash server", argv, port, root.with_suffix(".log"))


class _Volume(ScratchVolume):
    """The scratch volume with two configs: with the remote tier, and without it."""

    def __init__(self, root: Path, size: int, block: int, servers: list[str], transport: str, cold: str,
                 secret_file: Path) -> None:
        super().__init__(root, block)
        head = tier("ram", capacity=256 * MiB) + tier("nvme", capacity=2 * size + 64 * MiB)
        remote = tier("remote", servers=servers, replicas=REPLICAS, transport=transport,
                      secret_file=str(secret_file))
        self.with_remote = self.config("with-remote", head, remote, cold)
        self.without_remote = self.config("without-remote", head, cold)


# -- measurements ----------------------------------------------------------------------------


def _read_seq(path: Path, size: int, block: int) -> list[Result]:
    return [Result(read_rate(str(path), size, IO_SIZE), "MiB/s", label="read-seq")]


def _randread(path: Path, size: int, block: int) -> list[Result]:
    """One 4 KiB pread in every block, at a random page, blocks in random order.

    One read in each block of another file goes first, untimed: a fresh mount's first
    requests open its metadata tables, code paths and the first request on each server's
    connections, which a mount serving for days never pays again, and with one sample
    per block they would be the p99 (two reads had left some servers untouched).
    """
    pread_latencies(str(path.with_name(WARM_UP)), [b * block + block // 2 for b in range(WARM_UP_BLOCKS)], PAGE)
    rng = random.Random(SEED)
    blocks = list(range(-(-size // block)))
    rng.shuffle(blocks)
    offsets = [b * block + rng.randrange(min(block, size - b * block) // PAGE) * PAGE for b in blocks]
    latencies = pread_latencies(str(path), offsets, PAGE)
    return [Result(percentile(latencies, p) / 1e3, "µs", label=f"randread-p{p}") for p in (50, 99)]


def _wait_held(servers: list[str], copies: int, secret: Secret) -> None:
    """Offers reach the servers in the background after the upload; wait for all of them."""
    transport = TcpTransport(1, 5.0, secret=secret)
    connections = [transport.connect(Address.parse(s)) for s in servers]
    deadline = time.monotonic() + HOLD_TIMEOUT_S
    try:
        while sum(connection.stat(5.0).blocks for connection in connections) < copies:
            if time.monotonic() > deadline:
                raise BenchError(f"the flash servers did not receive {copies} blocks in {HOLD_TIMEOUT_S:.0f} s")
            time.sleep(0.2)
    finally:
        for connection in connections:
            connection.close()


# -- the mode --------------------------------------------------------------------------------


def run(base: str, scale: float, progress: Progress, s3_endpoint: str | None = None, bucket: str = BUCKET,
        s3_own_core: bool = False, servers: int = 3, transport: str = "auto", cold: str = "s3",
        block: int = BLOCK) -> Results:
    """Columns remote, remote-cold, nvme and the cold tier; rows read-seq and randread-p50/p99."""
    size = max(block, round(FILE_SIZE * scale) // block * block)
    with ExitStack() as stack:
        root = scratch_root(stack, base, "remote")
        capacity = 2 * size * REPLICAS // servers + 256 * MiB
        flash = [root / f"flash{i}" for i in range(servers)]
        secret_file = root / "flash.secret"
        write_secret_file(secret_file)
        cold_tier = s3_target(stack, root, s3_endpoint, bucket, s3_own_core).tier() if cold == "s3" else OBJSTORE
        addresses = [stack.enter_context(flash_server(path, capacity, transport, secret_file)) for path in flash]
        volume = _Volume(root, size, block, addresses, transport, cold_tier, secret_file)
        progress(f"writing {size >> 20} MiB in {block >> 10} KiB blocks; flash servers at {', '.join(addresses)}")
        with volume.mounted(volume.with_remote) as mnt:
            write_synced(str(mnt / "data.bin"), size, memoryview(os.urandom(IO_SIZE)))
            write_synced(str(mnt / WARM_UP), WARM_UP_BLOCKS * block, memoryview(os.urandom(IO_SIZE)))
            volume.sync(mnt)
            _wait_held(addresses, (size // block + WARM_UP_BLOCKS) * REPLICAS, Secret.from_file(secret_file))
        columns = [("nvme", []), ("remote", []), ("remote-cold", flash), (cold, [])]  # nvme first: the others wipe it
        results = {name: _measure(volume, name, size, block, evicted, progress) for name, evicted in columns}
        return {name: results[name] for name in ("remote", "remote-cold", "nvme", cold)}


def _measure(volume: _Volume, column: str, size: int, block: int, evicted: list[Path],
             progress: Progress) -> dict[str, Result]:
    """Both reads of the file, each through a fresh mount with the blocks only in the column's
    tier below RAM, after emptying the page cache of the node's data tiers and of `evicted`."""
    source = column.removesuffix("-cold")
    config = volume.without_remote if source in ("s3", "objstore") else volume.with_remote
    results = {}
    for measure in (_read_seq, _randread):
        if source != "nvme":
            volume.wipe_nvme()
        evict_files(*volume.data_tiers(), *evicted)
        progress(f"{column}: {measure.__name__.strip('_')}")
        with volume.mounted(config) as mnt:
            measured = measure(mnt / "data.bin", size, block)
            check_source(volume.status(), source)
        results.update({r.label: r for r in measured})
    return results


def goals(results: Results) -> list[str]:
    """The issue's targets: remote sequential >= 50% of NVMe's; remote random p99 < 1/10 of cold's,
    with the flash servers' page caches warm and cold."""
    remote, remote_cold, nvme, cold = results.values()
    name = list(results)[-1]
    lines = []
    for label, column in (("remote", remote), ("remote-cold", remote_cold)):
        seq = column["read-seq"].value / nvme["read-seq"].value
        p99 = column["randread-p99"].value / cold["randread-p99"].value
        lines += [f"{label} / nvme sequential: {seq:.2f} (goal >= 0.5)",
                  f"{label} / {name} random p99: {p99:.3f} (goal < 0.1)"]
    return lines


@click.command()
@click.argument("base", type=click.Path(exists=True, file_okay=False))
@click.option("--scale", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Multiply the file size (1 GiB).")
@click.option("--servers", type=click.IntRange(min=REPLICAS), default=3, show_default=True)
@click.option("--transport", type=click.Choice(["auto", "tcp", "verbs"]), default="auto", show_default=True)
@click.option("--cold", type=click.Choice(["s3", "objstore"]), default="s3", show_default=True)
@click.option("--s3-endpoint", help="Use this S3 endpoint (AWS credential chain) instead of a loopback moto.")
@click.option("--bucket", default=BUCKET, show_default=True)
@click.option("--block-size", type=SIZE, default=BLOCK, show_default=True, help="volume.block_size, e.g. 1MiB.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def main(base: str, scale: float, servers: int, transport: str, cold: str, s3_endpoint: str | None,
         bucket: str, block_size: int, as_json: bool) -> None:
    """Read one file from remote flash, local NVMe and the cold tier through fresh aifs mounts.

    BASE is a directory on the local disk (it plays the NVMe tier); the bench works in a
    scratch folder there, removed at the end. Needs root and /dev/fuse.
    """
    try:
        results = run(base, scale, lambda m: click.echo(m, err=True), s3_endpoint, bucket,
                      servers=servers, transport=transport, cold=cold, block=block_size)
    except (BenchError, OSError) as error:
        raise click.ClickException(str(error)) from error
    click.echo(report.render(results, scale, as_json, goals(results)))


MODE = Mode(NAME, "reads from remote flash vs NVMe vs the cold tier", run, goals)


if __name__ == "__main__":
    main()
