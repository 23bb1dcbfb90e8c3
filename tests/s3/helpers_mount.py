"""Mounting aifs over an S3 bucket for the write-back tests, and what those tests do to a
mount: write files keeping their digests, ask the control channel, wait for uploads, wipe
the local tiers and read everything back from the bucket alone.

The mounts are tests/conftest.py's Volume with an s3 bottom tier; the config is rendered
from dicts so that each test states only the keys it cares about (and can change them
between mounts: a crash test remounts without the bandwidth cap it crashed under).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

import pytest
from conftest import Volume, aifs_cli  # tests/conftest.py: mount, umount, kill9, cleanup

from aifs.control.client import ControlClient
from aifs.tiers.s3_marker import MARKER_NAME

from .conftest import ACCESS_KEY, SECRET_KEY

MiB = 1 << 20
BLOCK = MiB  # objects stay under 5 MiB: moto may corrupt larger ones listed mid-upload
PREFIX = "wb/"
CHUNK = 4 * MiB  # checkpoint writers write in pieces of this size
STATE_XATTR = "user.aifs.state"
DEFAULT_BUDGET_S = 150.0
T = TypeVar("T")


@dataclass
class S3Setup:
    """The parts of an aifs.toml these tests vary; everything else is a small fixed volume."""

    endpoint: str
    bucket: str
    prefix: str = PREFIX
    block_size: int = BLOCK
    nvme: str = "2GiB"
    nvme_path: str | None = None  # default: under the state directory
    remote: dict[str, Any] | None = None  # the keys of a remote flash tier table, if any
    s3: dict[str, Any] = field(default_factory=dict)  # extra keys of the s3 tier table
    writeback: dict[str, Any] = field(default_factory=dict)
    rules: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # the [meta] table: a shared engine's url
    cluster: dict[str, Any] = field(default_factory=dict)  # the [cluster] table: serving peers

    def render(self, state_dir: Path) -> str:
        tables = [
            ("[volume]", {"state_dir": str(state_dir), "block_size": self.block_size}),
            ("[[tiers]]", {"kind": "ram", "capacity": "64MiB"}),
            ("[[tiers]]", {"kind": "nvme", "capacity": self.nvme,
                           **({"path": self.nvme_path} if self.nvme_path else {})}),
            *((("[[tiers]]", {"kind": "remote", **self.remote}),) if self.remote else ()),
            ("[[tiers]]", {"kind": "s3", "endpoint": self.endpoint, "bucket": self.bucket,
                           "prefix": self.prefix, "access_key": ACCESS_KEY,
                           "secret_key": SECRET_KEY, **self.s3}),
            ("[writeback]", self.writeback),
            ("[meta]", self.meta),
            ("[cluster]", self.cluster),
            *(("[[rules]]", rule) for rule in self.rules),
        ]
        return "\n".join(_table(header, keys) for header, keys in tables)


def _table(header: str, keys: dict[str, Any]) -> str:
    """One TOML table; JSON's scalars (strings, numbers, true/false) are TOML's too."""
    return "\n".join([header, *(f"{key} = {json.dumps(value)}" for key, value in keys.items())]) + "\n"


class S3Volume(Volume):
    """A mountable volume whose bottom tier is a bucket; `setup` may change between mounts."""

    def __init__(self, base: Path, setup: S3Setup) -> None:
        super().__init__(base)
        self.setup = setup
        self.write_config()

    def write_config(self) -> None:
        self.config.write_text(self.setup.render(self.state_dir))

    def wipe_local(self) -> None:
        """Drop the NVMe tier entirely (RAM went with the process): only metadata and S3 remain."""
        assert self.st_dev is None, "unmount before wiping the local tiers"
        shutil.rmtree(self.state_dir / "nvme")

    def reload_from_s3(self) -> None:
        """Unmount, wipe NVMe and mount again, so that every read must come from the bucket."""
        self.umount()
        self.wipe_local()
        self.mount()

    def log_text(self) -> str:
        return (self.state_dir / "aifs.log").read_text(errors="replace")


@pytest.fixture
def make_s3_volume(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., S3Volume]]:
    """Factory of unmounted S3Volumes for one test, closed at teardown. A watchdog aborts their
    FUSE connections (and kills their daemons) if the test runs past its `timeout_s` budget,
    so a hang fails this test instead of freezing the run."""
    made: list[S3Volume] = []
    marker = request.node.get_closest_marker("timeout_s")
    budget = float(marker.args[0]) if marker else DEFAULT_BUDGET_S
    fired = threading.Event()

    def fire() -> None:
        fired.set()
        for volume in made:
            volume.abort_connection()

    timer = threading.Timer(budget, fire)
    timer.daemon = True
    timer.start()

    def make(endpoint: str, bucket: str, **setup: Any) -> S3Volume:
        volume = S3Volume(tmp_path / f"vol{len(made)}", S3Setup(endpoint, bucket, **setup))
        made.append(volume)
        return volume

    yield make
    timer.cancel()
    for volume in made:
        volume.close()
    if fired.is_set():
        pytest.fail(f"test hung for more than {budget:.0f}s; FUSE connections aborted")


# -- the aifs command line -------------------------------------------------------------------


def aifs_ok(*args: str, timeout: float = 120) -> str:
    """Run `python3 -m aifs ARGS`, which must succeed; its stdout."""
    cp = aifs_cli(*args, timeout=timeout)
    assert cp.returncode == 0, f"aifs {' '.join(args)}: exit {cp.returncode}\n{cp.stdout}\n{cp.stderr}"
    return cp.stdout


def sync_wait(path: Path, timeout: float = 120) -> str:
    """`aifs sync --wait PATH`: returns once everything under PATH is in the bucket."""
    return aifs_ok("sync", "--wait", str(path), timeout=timeout)


def status(path: Path) -> dict[str, Any]:
    """`aifs status --json` of the mount holding `path`."""
    return json.loads(aifs_ok("status", "--json", str(path)))


def poll_status(volume: S3Volume) -> dict[str, Any]:
    """The same report straight over the control socket: cheap enough to poll every few ms."""
    return ControlClient(volume.state_dir, timeout=30).call("status")


def file_state(path: Path) -> dict[str, Any]:
    """The per-file upload state the mount shows as an xattr (state: uploaded|pending|unsealed)."""
    return json.loads(os.getxattr(path, STATE_XATTR))


def wait_for(condition: Callable[[], T], what: str, timeout: float = 60, every: float = 0.01) -> T:
    """Poll `condition` until it returns something true, and return that (bounded: no hangs)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"gave up after {timeout:.0f} s waiting for {what}"
        time.sleep(every)
    return value


# -- the bucket, seen with plain boto3 (list only while nothing large uploads: docs/s3-and-writeback.md) --------


def bucket_keys(client: Any, bucket: str) -> set[str]:
    """Every key under the volume's prefix, the volume marker included."""
    listing = client.list_objects_v2(Bucket=bucket, Prefix=PREFIX)
    return {entry["Key"] for entry in listing.get("Contents", ())}


def block_objects(client: Any, bucket: str) -> dict[str, bytes]:
    """Every object under the prefix but the volume marker, with its bytes."""
    keys = sorted(key for key in bucket_keys(client, bucket) if not key.endswith(MARKER_NAME))
    return {key: client.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys}


# -- data --------------------------------------------------------------------------------------


def write_random(path: Path, size: int, fsync: bool = False) -> str:
    """Write `size` random bytes in CHUNK writes, as a checkpoint writer does; their sha256."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for offset in range(0, size, CHUNK):
            chunk = os.urandom(min(CHUNK, size - offset))
            digest.update(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return digest.hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def assert_digests(root: Path, digests: dict[str, str]) -> None:
    """Every file under `root` named in `digests` reads back with the bytes that were written."""
    wrong = [name for name, want in sorted(digests.items()) if sha256_file(root / name) != want]
    assert not wrong, f"{len(wrong)} of {len(digests)} files differ from what was written: {wrong}"
