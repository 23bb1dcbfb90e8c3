"""Scaffolding for bench modes that build their own volumes: child processes, configs, mounts.

A mode measures what no workload on a given directory can (which tier serves a read,
what durability costs against S3), so it needs a volume whose tiers it chooses. It
works in a scratch folder under BASE, starts what the volume needs as child processes
on 127.0.0.1 (a moto S3 server, flash block servers), writes TOML configs, and mounts
and unmounts with the `aifs` CLI as an operator would. Everything here ends with the
ExitStack or with-block that started it, also on error or Ctrl-C.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from aifs.bench.measure import MiB, Stopwatch
from aifs.bench.workload import BenchError
from aifs.config.models import S3Tier as S3Settings
from aifs.tiers.s3_client import make_client
from aifs.tiers.s3_marker import MARKER_NAME

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0
CLI_TIMEOUT_S = 300.0
MOTO_KEYS = {"access_key": "aifs-bench", "secret_key": "aifs-bench-secret"}
BUCKET = "aifs-bench"
BLOCK = 4 * MiB  # the volume default
TIER_ORDER = ("ram", "nvme", "remote", "objstore", "s3")  # top to bottom
SOURCE_SHARE = 0.9
# moto holds every object in memory, a few 4 MiB buffers per PUT. By default glibc hands
# such buffers back to the kernel when they are freed, and on a VM that returns free pages
# to its host, faulting them in again cost moto more CPU than the PUT itself (5-9 s of
# kernel time per 2 GiB, depending on what ran before). Kept in the heap, they cost every
# column the same, as a real S3 endpoint's memory does not bill this machine at all.
MOTO_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(64 * MiB), "MALLOC_TRIM_THRESHOLD_": str(16 << 30),
               "MALLOC_ARENA_MAX": "2"}


# -- child processes ---------------------------------------------------------------------------


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now, for a child server to bind."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env() -> dict[str, str]:
    """Children import this checkout of aifs, whatever is installed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _wait_listening(proc: subprocess.Popen, name: str, port: int, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise BenchError(f"{name} did not start on port {port}: {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)


@contextmanager
def child(name: str, argv: list[str], port: int, log: Path, env: dict[str, str] | None = None,
          cpus: set[int] | None = None) -> Iterator[str]:
    """Run `argv` (with `env` added to its environment, on `cpus` if given) until the block
    ends; yields 127.0.0.1:PORT once the port accepts connections, so a mode never races a
    server that is still starting, and never leaves one behind."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=child_env() | (env or {}))
    try:
        if cpus is not None:  # before it starts any thread: its threads inherit the set
            os.sched_setaffinity(proc.pid, cpus)
        _wait_listening(proc, name, port, log)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def moto(root: Path, cpus: set[int] | None = None) -> AbstractContextManager[str]:
    """moto's standalone S3 server on 127.0.0.1: a real HTTP endpoint, as the tests use,
    with its freed memory kept for reuse (MOTO_MALLOC)."""
    port = free_port()
    argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    return child("moto S3 server", argv, port, root / "moto.log", MOTO_MALLOC, cpus)


def aifs_cli(*args: str, timeout: float = CLI_TIMEOUT_S) -> str:
    """Run `aifs ARGS` as an operator would; its stdout, or a BenchError with what it said."""
    done = subprocess.run([sys.executable, "-m", "aifs", *args], capture_output=True, text=True,
                          env=child_env(), stdin=subprocess.DEVNULL, timeout=timeout)
    if done.returncode != 0:
        raise BenchError(f"aifs {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def scratch_root(stack: ExitStack, base: str, name: str) -> Path:
    """A fresh folder under BASE for one mode's volumes and servers, removed when `stack`
    closes (after the mounts and children entered later have ended)."""
    root = Path(tempfile.mkdtemp(prefix=f".aifs-bench-{name}-", dir=base))
    stack.callback(shutil.rmtree, root, True)
    return root


# -- configs and volumes -----------------------------------------------------------------------


def table(header: str, **keys: object) -> str:
    """One TOML table; json.dumps writes strings, numbers, booleans and lists as TOML reads them."""
    return "\n".join([header, *(f"{key} = {json.dumps(value)}" for key, value in keys.items())]) + "\n\n"


def tier(kind: str, **keys: object) -> str:
    """One `[[tiers]]` entry."""
    return table("[[tiers]]", kind=kind, **keys)


@dataclass(frozen=True)
class S3Target:
    """One endpoint, bucket and prefix, for a volume's cold tier and for boto3 alone alike,
    so that a comparison between them talks to exactly the same place."""

    endpoint: str
    bucket: str
    prefix: str
    moto_keys: bool  # moto takes any key; a real endpoint gets the AWS credential chain

    def _keys(self) -> dict[str, object]:
        keys = {"endpoint": self.endpoint, "bucket": self.bucket, "prefix": self.prefix, "create_bucket": True}
        return keys | MOTO_KEYS if self.moto_keys else keys

    def sibling(self, name: str) -> "S3Target":
        """The same endpoint and bucket under a prefix of its own, for another volume or boto3 alone."""
        return replace(self, prefix=f"{self.prefix.rstrip('/')}-{name}/")

    def tier(self, **keys: object) -> str:
        """The volume's `[[tiers]]` entry, with `keys` added."""
        return tier("s3", **self._keys(), **keys)

    def client(self) -> Any:
        """A boto3 client configured exactly as the volume's own (aifs.tiers.s3_client)."""
        return make_client(S3Settings.model_validate({"kind": "s3", **self._keys()}))

    def block_keys(self) -> list[str]:
        """Every object under the volume's prefix but its marker: the volume's blocks."""
        with s3_errors(f"listing s3://{self.bucket}/{self.prefix}"):
            pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix)
            keys = [entry["Key"] for page in pages for entry in page.get("Contents", [])]
        return [key for key in keys if key != self.prefix + MARKER_NAME]

    def get_each(self, keys: list[str], threads: int) -> tuple[int, int]:
        """GET each object once with boto3 alone, the keys dealt over `threads` threads: what
        the endpoint gives a client that does nothing else. The bytes received and the ns it
        took, the client made before the clock starts."""
        client = self.client()

        def get(batch: list[str]) -> int:
            received = 0
            for key in batch:
                with s3_errors(f"GET s3://{self.bucket}/{key}"):
                    received += len(client.get_object(Bucket=self.bucket, Key=key)["Body"].read())
            return received

        with Stopwatch() as watch, ThreadPoolExecutor(threads) as pool:
            received = sum(pool.map(get, [keys[i::threads] for i in range(threads)]))
        return received, watch.ns


@contextmanager
def s3_errors(what: str) -> Iterator[None]:
    """boto3's failures as BenchErrors naming the request, so the bench reports them like any other."""
    try:
        yield
    except (BotoCoreError, ClientError) as error:
        raise BenchError(f"{what}: {error}") from error


def s3_target(stack: ExitStack, root: Path, endpoint: str | None, bucket: str,
              own_core: bool = False) -> S3Target:
    """The given endpoint, or a moto server on 127.0.0.1 that lives as long as `stack`.

    With `own_core` the server gets one core, and this thread (with the mounts, writers and
    servers it starts later) the others until `stack` closes: as if S3 were another machine,
    whose CPU the client's work never competes with."""
    prefix = f"aifs-bench-{os.getpid()}/"
    if endpoint is not None:
        if own_core:
            raise BenchError("--s3-own-core gives a core to the moto server a mode starts; "
                             "with --s3-endpoint none is started")
        return S3Target(endpoint, bucket, prefix, moto_keys=False)
    server_cpus = _server_core(stack) if own_core else None
    return S3Target("http://" + stack.enter_context(moto(root, server_cpus)), bucket, prefix, moto_keys=True)


def _server_core(stack: ExitStack) -> set[int]:
    """Keep this thread off the last of its cores until `stack` closes; returns that core."""
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        raise BenchError(f"--s3-own-core needs 2 cores or more; this process may use {len(cpus)}")
    server = {max(cpus)}
    os.sched_setaffinity(0, cpus - server)
    stack.callback(os.sched_setaffinity, 0, cpus)
    return server


class ScratchVolume:
    """One volume in a scratch folder: configs written beside it, mounted and unmounted with the CLI."""

    def __init__(self, root: Path, block: int = BLOCK) -> None:
        self.root = root
        self.block = block
        self.state = root / "state"
        self.mountpoint = root / "mnt"
        self.mountpoint.mkdir()

    def config(self, name: str, *tables: str) -> Path:
        """Write ROOT/NAME.toml: this volume, then `tables` (tiers, rules...), quiet logging."""
        path = self.root / f"{name}.toml"
        volume = table("[volume]", state_dir=str(self.state), block_size=self.block)
        path.write_text(volume + "".join(tables) + table("[logging]", level="warning"))
        return path

    @contextmanager
    def mounted(self, config: Path) -> Iterator[Path]:
        """Mounted with `config` for the block; unmounted after it, also on error. A failed
        file operation is reported with the end of the mount's log, which says why."""
        aifs_cli("mount", "-c", str(config), "--background", str(self.mountpoint))
        try:
            yield self.mountpoint
        except OSError as error:
            raise BenchError(f"{error}; the mount's log ends:\n{self._log_tail()}") from error
        finally:
            aifs_cli("umount", str(self.mountpoint))

    def _log_tail(self, lines: int = 3) -> str:
        try:
            return "\n".join((self.state / "aifs.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError as error:
            return f"(no log: {error})"

    def data_tiers(self) -> list[Path]:
        """The folders of the node's data tiers that exist (NVMe, local object store);
        not the metadata."""
        return [path for path in (self.state / "nvme", self.state / "objects") if path.exists()]

    def wipe_nvme(self) -> None:
        """Empty the NVMe tier (unmounted only), so the next mount must read from further down."""
        shutil.rmtree(self.state / "nvme", ignore_errors=True)

    def status(self) -> dict:
        """`aifs status --json` of the mount: tier counters, uploads, pins."""
        return json.loads(aifs_cli("status", "--json", str(self.mountpoint)))

    def sync(self, path: Path) -> None:
        """Wait until everything under `path` is in the durable tier (`aifs sync --wait`)."""
        aifs_cli("sync", "--wait", str(path), timeout=10 * CLI_TIMEOUT_S)


# -- which tier served a read ------------------------------------------------------------------


def tier_reads(after: dict, before: dict | None = None) -> dict[str, int]:
    """Bytes each tier served between two `aifs status` reports (since the mount without `before`)."""
    start = before["tiers"] if before else {}
    return {name: tier["bytes_read"] - start.get(name, {}).get("bytes_read", 0)
            for name, tier in after["tiers"].items()}


def check_source(after: dict, source: str, before: dict | None = None) -> None:
    """A number measured on the wrong tier is an error, never a result: something must come
    from `source`, nothing from below it, and nearly everything from it (the prefetcher may
    fetch a block early and a later read find it a tier up). RAM counts only as the source,
    as every block read from below also passes through it."""
    read = {name: n for name, n in tier_reads(after, before).items() if name != "ram" or source == "ram"}
    below = {name: n for name, n in read.items() if n and TIER_ORDER.index(name) > TIER_ORDER.index(source)}
    if below or not read.get(source) or read[source] < SOURCE_SHARE * sum(read.values()):
        raise BenchError(f"reads meant for the {source} tier were served by {read}")
