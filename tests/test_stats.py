"""`aifs stats`: rates of a running mount's FUSE requests, tier reads and uploads, sampled over
its control socket; one JSON sample for scripts, a live view that Ctrl-C ends cleanly, and a
clear refusal for a path on no aifs mount."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import REPO, aifs_cli
from helpers import pattern, write_file

from aifs.cli.stats_view import frame_lines

FILE_SIZE = 1 << 20
CLEAR = "\x1b[2J"
FRAME_HEADER = "aifs stats "
TOP_KEYS = {"mount", "time", "interval_s", "fuse", "tiers", "uploads"}
FUSE_KEYS = {"ops_per_s", "errors_per_s", "latency_ms", "ops"}
OPERATION_KEYS = {"ops_per_s", "errors_per_s", "latency_ms"}
TIER_KEYS = {"hits_per_s", "bytes_read_per_s", "hit_ratio", "used", "capacity", "up"}
UPLOAD_KEYS = {"pending_blocks", "pending_bytes", "dirty_bytes", "offers_pending", "uploaded_blocks_per_s",
               "uploaded_bytes_per_s"}


def _read_uncached(path: Path) -> bytes:
    """The whole file with its page cache dropped first, so that every byte is a FUSE read."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return os.read(fd, FILE_SIZE + 1)
    finally:
        os.close(fd)


@contextmanager
def busy(directory: Path) -> Iterator[None]:
    """Writes and uncached reads of a few files on the mount, over and over, while the block runs."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def work() -> None:
        try:
            for turn in range(1_000_000):
                if stop.is_set():
                    return
                path, data = directory / f"f{turn % 4}", pattern(turn, FILE_SIZE)
                write_file(path, data)
                assert _read_uncached(path) == data
        except BaseException as e:  # noqa: BLE001 - reported by the test
            failures.append(e)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    try:
        yield
    finally:
        stop.set()
        worker.join(30)
    assert not worker.is_alive() and not failures, failures


def test_once_json_gives_rates_of_requests_tier_reads_and_uploads(d):
    with busy(d):
        cp = aifs_cli("stats", "--once", "--json", "--interval", "1", str(d), timeout=30)
    assert cp.returncode == 0, cp.stderr
    sample = json.loads(cp.stdout)
    assert set(sample) == TOP_KEYS
    assert sample["mount"] == str(d.parent) and sample["interval_s"] > 0

    fuse = sample["fuse"]
    assert set(fuse) == FUSE_KEYS and fuse["ops_per_s"] > 0
    for op in ("write", "read"):
        assert set(fuse["ops"][op]) == OPERATION_KEYS
        assert fuse["ops"][op]["ops_per_s"] > 0 and fuse["ops"][op]["latency_ms"] > 0

    tiers = sample["tiers"]
    assert list(tiers) == ["ram", "nvme", "objstore"]  # top to bottom, as configured
    assert all(TIER_KEYS <= set(tier) and tier["up"] for tier in tiers.values())
    assert sum(tier["bytes_read_per_s"] for tier in tiers.values()) > 0
    served = [tier["hit_ratio"] for tier in tiers.values() if tier["hits_per_s"] > 0]
    assert served and all(0 < ratio <= 1 for ratio in served)
    assert set(sample["uploads"]) == UPLOAD_KEYS


def _stats_process(path: Path, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-m", "aifs", "stats", str(path)], cwd=REPO, env=env,
                            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, **popen)


def _read_until(fd: int, done, timeout: float = 20) -> str:
    """What the process writes on `fd` until `done(text so far)` holds; fails after `timeout` s."""
    text = b""
    deadline = time.monotonic() + timeout
    while not done(text.decode(errors="replace")):
        left = deadline - time.monotonic()
        assert left > 0, f"gave up waiting for frames; got:\n{text.decode(errors='replace')}"
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 65536)
            assert chunk, f"the output ended early:\n{text.decode(errors='replace')}"
            text += chunk
    return text.decode(errors="replace")


def _interrupted(proc: subprocess.Popen) -> str:
    """Ctrl-C: the process must end at once, with exit 0 and nothing on stderr."""
    proc.send_signal(signal.SIGINT)
    try:
        _, stderr = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    return stderr.decode()


def test_live_view_prints_a_block_per_interval_until_ctrl_c(d):
    """Not on a terminal: one plain block after another, no escape codes."""
    proc = _stats_process(d, stdout=subprocess.PIPE)
    with busy(d):
        text = _read_until(proc.stdout.fileno(), lambda text: text.count("\n\n") >= 2)
    assert _interrupted(proc) == ""
    frames = [frame for frame in text.split("\n\n") if frame]
    assert len(frames) >= 2 and "\x1b" not in text
    for frame in frames[:2]:
        assert frame.startswith(f"{FRAME_HEADER}{d.parent}")
        assert "  read " in frame and "  ram " in frame and "  uploads " in frame


def test_live_view_redraws_in_place_on_a_terminal(d):
    parent, child = os.openpty()
    try:
        proc = _stats_process(d, stdout=child)
        os.close(child)
        text = _read_until(parent, lambda text: text.count(CLEAR) >= 2 and text.rstrip().endswith("(Ctrl-C ends)"))
        assert _interrupted(proc) == ""
    finally:
        os.close(parent)
    frames = text.split(CLEAR)[1:]
    assert len(frames) >= 2 and all(FRAME_HEADER in frame for frame in frames)


@pytest.mark.parametrize("where", ["plain directory", "other filesystem"])
def test_a_path_on_no_aifs_mount_is_refused_in_one_line(tmp_path, where):
    path = tmp_path if where == "plain directory" else Path("/proc")
    cp = aifs_cli("stats", "--once", str(path), timeout=30)
    assert cp.returncode == 2, cp.stderr
    assert cp.stdout == "" and cp.stderr.count("\n") == 1 and "Traceback" not in cp.stderr
    assert cp.stderr.startswith(f"aifs: {path} is not on an aifs mount")


def test_the_view_names_what_is_down():
    """A durable tier whose circuit breaker is open and peers of which one is down, as a sample
    from a mount that sees them so would carry them."""
    down = {"up": False, "breaker": "open", "failures": 5, "last_error": "connection refused", "down_for_s": 12.0}
    peer = {"server": "10.0.0.8:7100", **down, "answered_per_s": 0.0}
    alive = {"server": "10.0.0.7:7100", "up": True, "breaker": "closed", "failures": 0, "last_error": None,
             "down_for_s": None, "answered_per_s": 40.0}
    idle = {"hits_per_s": 0.0, "bytes_read_per_s": 0.0, "hit_ratio": None, "used": 0, "capacity": 1 << 30}
    sample = {"mount": "/mnt/aifs", "time": time.time(), "interval_s": 1.0,
              "fuse": {"ops_per_s": 0.0, "errors_per_s": 0.0, "latency_ms": None, "ops": {}},
              "tiers": {"peers": {**idle, "up": True, "servers": [alive, peer]}, "s3": {**idle, **down}},
              "uploads": dict.fromkeys(UPLOAD_KEYS, 0)}
    text = "\n".join(frame_lines(sample))
    assert "up, 1 of 2 peers up" in text and "10.0.0.8:7100 down for 12 s (circuit breaker open" in text
    assert "DOWN, breaker open" in text and "unreachable: circuit breaker open" in text


def test_help_does_not_load_the_storage_stack():
    """`aifs stats` runs beside training jobs every second: it must stay a light client."""
    probe = ("import sys; from click.testing import CliRunner; from aifs.cli.main import cli; "
             "assert CliRunner().invoke(cli, ['stats', '--help']).exit_code == 0; "
             "print([m for m in ('boto3', 'rocksdict', 'pyfuse3', 'trio', 'prometheus_client') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
