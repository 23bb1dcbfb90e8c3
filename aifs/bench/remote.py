"""Remote-tier reads beside local NVMe and the cold tier: a bench mode that builds its own volume.

The registry's workloads run on any directory through plain `os` calls, so they cannot
choose which tier holds a block. This mode can. In a scratch folder under BASE (the
local disk that plays NVMe) it starts flash block servers on 127.0.0.1 and a cold
tier (a loopback S3 endpoint, moto, unless one is given; or a local object store),
mounts an aifs volume with ram, nvme, remote and cold tiers, writes one file, waits
until the cold tier and the flash servers hold all of it, and then reads it through
fresh mounts, each time with the blocks in exactly one tier below RAM:

    nvme     remounted as is: NVMe holds every block, RAM none
    remote   NVMe wiped first: the blocks are only on the flash servers
    cold     NVMe wiped, mounted without the remote tier: only the cold tier has them

Each gets a sequential read of the file (MiB/s), and after another fresh mount one 4 KiB
pread at a random offset in every block, blocks in random order (p50/p99 µs): every
sample is its block's first touch, so it pays that tier's whole-block fetch. The
kernel's caches are dropped before each mount (root), and the mount's own tier
counters are checked after each read: a number measured on the wrong tier is an
error, never a result.

    python3 -m aifs.bench.remote BASE [--scale F] [--servers N] [--block-size SIZE]
                                      [--cold s3|objstore] [--s3-endpoint URL --bucket NAME] [--json]
"""

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path

import click

from aifs.bench import report
from aifs.bench.caches import CacheDropper
from aifs.bench.fileio import expect_size, read_sequential, write_all
from aifs.bench.measure import GiB, KiB, MiB, Stopwatch, mib_per_second, percentile
from aifs.bench.workload import BenchError, Result, Results
from aifs.cli.flash_cmd import SIZE
from aifs.rdma.tcp import TcpTransport
from aifs.rdma.transport import Address

NAME = "remote-tier"
FILE_SIZE = 1 * GiB
BLOCK = 4 * MiB  # the volume default
IO_SIZE = 4 * MiB
PAGE = 4 * KiB
REPLICAS = 2
SEED = 3
START_TIMEOUT_S = 30.0
HOLD_TIMEOUT_S = 300.0
SOURCE_SHARE = 0.9
BELOW_RAM = ("nvme", "remote", "objstore", "s3")  # top to bottom
MOTO_KEYS = ('access_key = "aifs-bench"', 'secret_key = "aifs-bench-secret"')
REPO = Path(__file__).resolve().parents[2]

Progress = Callable[[str], None]


# -- child processes: flash servers and a loopback S3 endpoint ---------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    """Children import this checkout of aifs, whatever is installed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


@contextmanager
def _child(name: str, argv: list[str], port: int, log: Path) -> Iterator[str]:
    """Run `argv` until the block ends; yields 127.0.0.1:PORT once the port accepts connections."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=_env())
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"{name} did not start on port {port}: {log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _flash_server(root: Path, capacity: int, transport: str) -> AbstractContextManager[str]:
    port = _free_port()
    argv = [sys.executable, "-m", "aifs", "flash", "serve", "--dir", str(root), "--capacity", str(capacity),
            "--listen", f"127.0.0.1:{port}", "--transport", transport, "--log-level", "warning"]
    return _child("flash server", argv, port, root.with_suffix(".log"))


def _moto(root: Path) -> AbstractContextManager[str]:
    port = _free_port()
    argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    return _child("moto S3 server", argv, port, root / "moto.log")


# -- the volume ------------------------------------------------------------------------------


def _aifs(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "aifs", *args], capture_output=True, text=True, env=_env(),
                          stdin=subprocess.DEVNULL, timeout=300)
    if done.returncode != 0:
        raise BenchError(f"aifs {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


class _Volume:
    """One scratch volume, mounted and unmounted with the CLI as an operator would."""

    def __init__(self, root: Path, size: int, block: int, servers: list[str], transport: str, cold: str) -> None:
        self.state = root / "state"
        self.mountpoint = root / "mnt"
        self.mountpoint.mkdir()
        head = (f'[volume]\nstate_dir = "{self.state}"\nblock_size = {block}\n\n'
                f'[[tiers]]\nkind = "ram"\ncapacity = "256MiB"\n\n'
                f'[[tiers]]\nkind = "nvme"\ncapacity = {2 * size + 64 * MiB}\n\n')
        remote = (f'[[tiers]]\nkind = "remote"\nservers = {json.dumps(servers)}\nreplicas = {REPLICAS}\n'
                  f'transport = "{transport}"\n\n')
        tail = f"{cold}\n[logging]\nlevel = \"warning\"\n"
        self.with_remote = root / "with-remote.toml"
        self.with_remote.write_text(head + remote + tail)
        self.without_remote = root / "without-remote.toml"
        self.without_remote.write_text(head + tail)

    @contextmanager
    def mounted(self, config: Path) -> Iterator[Path]:
        _aifs("mount", "-c", str(config), "--background", str(self.mountpoint))
        try:
            yield self.mountpoint
        finally:
            _aifs("umount", str(self.mountpoint))

    def wipe_nvme(self) -> None:
        shutil.rmtree(self.state / "nvme", ignore_errors=True)

    def status(self) -> dict:
        return json.loads(_aifs("status", "--json", str(self.mountpoint)))


def _cold_tier(kind: str, endpoint: str | None, bucket: str, moto_keys: bool) -> str:
    if kind == "objstore":
        return '[[tiers]]\nkind = "objstore"\n'
    keys = "\n".join(MOTO_KEYS) + "\n" if moto_keys else ""
    return (f'[[tiers]]\nkind = "s3"\nendpoint = "{endpoint}"\nbucket = "{bucket}"\n'
            f'prefix = "aifs-bench-{os.getpid()}/"\ncreate_bucket = true\n{keys}')


# -- measurements ----------------------------------------------------------------------------


def _write(path: Path, size: int) -> None:
    chunk = memoryview(os.urandom(IO_SIZE))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for offset in range(0, size, IO_SIZE):
            write_all(fd, chunk[: size - offset])
    finally:
        os.close(fd)


def _read_seq(path: Path, size: int, block: int) -> list[Result]:
    with Stopwatch() as watch:
        got = read_sequential(str(path), IO_SIZE)
    expect_size(str(path), got, size)
    return [Result(mib_per_second(size, watch.ns), "MiB/s", label="read-seq")]


def _randread(path: Path, size: int, block: int) -> list[Result]:
    """One 4 KiB pread in every block, at a random page, blocks in random order."""
    rng = random.Random(SEED)
    blocks = list(range(-(-size // block)))
    rng.shuffle(blocks)
    offsets = [b * block + rng.randrange(min(block, size - b * block) // PAGE) * PAGE for b in blocks]
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no kernel readahead into other blocks
        latencies = []
        for offset in offsets:
            start = time.perf_counter_ns()
            got = len(os.pread(fd, PAGE, offset))
            latencies.append(time.perf_counter_ns() - start)
            expect_size(str(path), got, PAGE)
    finally:
        os.close(fd)
    return [Result(percentile(latencies, p) / 1e3, "µs", label=f"randread-p{p}") for p in (50, 99)]


def _check_source(status: dict, source: str) -> None:
    """Nothing may come from below `source`, and nearly everything from it: the mount's
    prefetcher may fetch a block early and a later read find it in NVMe, never more."""
    read = {name: tier["bytes_read"] for name, tier in status["tiers"].items() if name != "ram"}
    below = {name: n for name, n in read.items() if n and BELOW_RAM.index(name) > BELOW_RAM.index(source)}
    if below or read[source] < SOURCE_SHARE * sum(read.values()):
        raise BenchError(f"reads meant for the {source} tier were served by {read}")


def _wait_held(servers: list[str], copies: int) -> None:
    """Offers reach the servers in the background after the upload; wait for all of them."""
    transport = TcpTransport(1, 5.0)
    deadline = time.monotonic() + HOLD_TIMEOUT_S
    try:
        while sum(transport.connect(Address.parse(s)).stat(5.0).blocks for s in servers) < copies:
            if time.monotonic() > deadline:
                raise BenchError(f"the flash servers did not receive {copies} blocks in {HOLD_TIMEOUT_S:.0f} s")
            time.sleep(0.2)
    finally:
        transport.close()


# -- the mode --------------------------------------------------------------------------------


def run(base: str, scale: float, progress: Progress, servers: int = 3, transport: str = "auto",
        cold: str = "s3", s3_endpoint: str | None = None, bucket: str = "aifs-bench", block: int = BLOCK) -> Results:
    """Columns remote, nvme and the cold tier; rows read-seq and randread-p50/p99."""
    size = max(block, round(FILE_SIZE * scale) // block * block)
    drop_caches = CacheDropper(warn=progress)
    with ExitStack() as stack:
        root = Path(tempfile.mkdtemp(prefix=".aifs-bench-remote-", dir=base))
        stack.callback(shutil.rmtree, root, True)
        capacity = 2 * size * REPLICAS // servers + 256 * MiB
        addresses = [stack.enter_context(_flash_server(root / f"flash{i}", capacity, transport))
                     for i in range(servers)]
        moto = cold == "s3" and s3_endpoint is None
        if moto:
            s3_endpoint = "http://" + stack.enter_context(_moto(root))
        volume = _Volume(root, size, block, addresses, transport, _cold_tier(cold, s3_endpoint, bucket, moto))
        progress(f"writing {size >> 20} MiB in {block >> 10} KiB blocks; flash servers at {', '.join(addresses)}")
        with volume.mounted(volume.with_remote) as mnt:
            _write(mnt / "data.bin", size)
            _aifs("sync", "--wait", str(mnt))
            _wait_held(addresses, size // block * REPLICAS)
        results = {source: _measure(volume, source, size, block, drop_caches, progress)
                   for source in ("nvme", "remote", cold)}  # nvme first: the others wipe it
        return {name: results[name] for name in ("remote", "nvme", cold)}


def _measure(volume: _Volume, source: str, size: int, block: int, drop_caches: CacheDropper,
             progress: Progress) -> dict[str, Result]:
    """Both reads of the file, each through a fresh mount with the blocks only in `source` below RAM."""
    config = volume.without_remote if source in ("s3", "objstore") else volume.with_remote
    results = {}
    for measure in (_read_seq, _randread):
        if source != "nvme":
            volume.wipe_nvme()
        note = drop_caches()
        progress(f"{source}: {measure.__name__.strip('_')}")
        with volume.mounted(config) as mnt:
            measured = measure(mnt / "data.bin", size, block)
            _check_source(volume.status(), source)
        results.update({r.label: Result(r.value, r.unit, note) for r in measured})
    return results


def goals(results: Results) -> list[str]:
    """The issue's targets: remote sequential >= 50% of NVMe's; remote random p99 < 1/10 of cold's."""
    remote, nvme, cold = results.values()
    seq = remote["read-seq"].value / nvme["read-seq"].value
    p99 = remote["randread-p99"].value / cold["randread-p99"].value
    return [f"remote / nvme sequential: {seq:.2f} (goal >= 0.5)",
            f"remote / {list(results)[-1]} random p99: {p99:.3f} (goal < 0.1)"]


@click.command()
@click.argument("base", type=click.Path(exists=True, file_okay=False))
@click.option("--scale", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Multiply the file size (1 GiB).")
@click.option("--servers", type=click.IntRange(min=REPLICAS), default=3, show_default=True)
@click.option("--transport", type=click.Choice(["auto", "tcp", "verbs"]), default="auto", show_default=True)
@click.option("--cold", type=click.Choice(["s3", "objstore"]), default="s3", show_default=True)
@click.option("--s3-endpoint", help="Use this S3 endpoint (AWS credential chain) instead of a loopback moto.")
@click.option("--bucket", default="aifs-bench", show_default=True)
@click.option("--block-size", type=SIZE, default=BLOCK, show_default=True, help="volume.block_size, e.g. 1MiB.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def main(base: str, scale: float, servers: int, transport: str, cold: str, s3_endpoint: str | None,
         bucket: str, block_size: int, as_json: bool) -> None:
    """Read one file from remote flash, local NVMe and the cold tier through fresh aifs mounts.

    BASE is a directory on the local disk (it plays the NVMe tier); the bench works in a
    scratch folder there, removed at the end. Needs root and /dev/fuse.
    """
    try:
        results = run(base, scale, lambda m: click.echo(m, err=True), servers, transport, cold, s3_endpoint, bucket,
                      block_size)
    except (BenchError, OSError) as error:
        raise click.ClickException(str(error)) from error
    if as_json:
        click.echo(report.to_json(results, scale))
    else:
        click.echo(report.to_table(results))
        click.echo("\n".join(goals(results)))


if __name__ == "__main__":
    main()
