"""`aifs status` and `aifs sync --wait` tell the truth about a real mount over a real (moto) S3:
S3 down shows as down with its circuit breaker open, in text and JSON, and `sync --wait`
says so while it waits (or gives up at --timeout); sizes are in binary units; the bucket's
used figure survives a remount; readahead counters are labelled as totals since mount;
heat is explained; a tier that is not configured is not shown."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, Volume, aifs_cli

from .helpers_mount import (
    MiB, aifs_ok, make_s3_volume, poll_status, sync_wait, wait_for, write_random,
)

__all__ = ["make_s3_volume"]  # the fixture, imported so pytest finds it

# A frozen S3 must cost seconds: short timeouts, and a breaker that opens after two failures.
S3_KEYS = {"connect_timeout": 1.0, "read_timeout": 1.0, "retries": 1,
           "breaker_failures": 2, "breaker_cooldown": 2.0}
DECIMAL_UNITS = re.compile(r"\d\s?[kKMGTP]B\b")


def status_text(path: Path) -> str:
    text = aifs_ok("status", str(path))
    assert not DECIMAL_UNITS.search(text), f"sizes must be printed in binary units:\n{text}"
    return text


def status_json(path: Path) -> dict:
    return json.loads(aifs_ok("status", "--json", str(path)))


def tier_line(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if line.strip().startswith(name + " "))


def breaker_open(volume) -> bool:
    return poll_status(volume)["tiers"]["s3"].get("breaker") == "open"


@pytest.mark.timeout_s(200)
def test_s3_down_shows_in_status_and_in_sync_wait(make_s3_volume, private_moto):
    volume = make_s3_volume(private_moto.endpoint, private_moto.create_bucket(), s3=S3_KEYS)
    volume.mount()
    write_random(volume.path / "before.bin", 2 * MiB)
    sync_wait(volume.path)
    up = status_json(volume.path)["tiers"]["s3"]
    assert (up["up"], up["breaker"]) == (True, "closed"), up
    assert tier_line(status_text(volume.path), "s3").endswith(" up")

    private_moto.freeze()
    try:
        write_random(volume.path / "during.bin", 3 * MiB)
        wait_for(lambda: breaker_open(volume), "uploads to fail and the S3 breaker to open", timeout=90, every=0.2)
        down = status_json(volume.path)["tiers"]["s3"]
        assert down["up"] is False and down["breaker"] in ("open", "half-open"), down
        assert down["last_error"], down
        text = status_text(volume.path)
        assert tier_line(text, "s3").endswith(" DOWN"), text
        assert "unreachable: circuit breaker" in text and "last error:" in text, text

        gave_up = aifs_cli("sync", "--wait", "--timeout", "3", str(volume.path), timeout=60)
        assert gave_up.returncode == 1, gave_up
        assert "gave up after 3 s" in gave_up.stderr and "still pending upload" in gave_up.stderr, gave_up
        assert "s3 is unreachable: circuit breaker" in gave_up.stderr, gave_up
        assert re.search(r"sync .*: .* uploaded, \d+ blocks \(.*iB\) pending", gave_up.stdout), gave_up.stdout

        waiting = subprocess.Popen([sys.executable, "-m", "aifs", "sync", "--wait", str(volume.path)], cwd=REPO,
                                   env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
        first = waiting.stdout.readline()  # it shows progress while S3 is still frozen
        assert first.startswith(f"sync {volume.path}: "), first
    finally:
        private_moto.thaw()
    waiting.wait(timeout=120)  # its few lines fit in the pipe
    said = first + waiting.stdout.read()
    assert waiting.returncode == 0, said
    assert "s3 is unreachable: circuit breaker" in said and "s3 answers again" in said, said
    assert "were pending, now uploaded" in said.splitlines()[-1], said
    assert poll_status(volume)["pending_blocks"] == 0
    assert status_json(volume.path)["tiers"]["s3"]["up"] is True


@pytest.mark.timeout_s(150)
def test_s3_used_survives_a_remount(make_s3_volume, moto_server):
    volume = make_s3_volume(moto_server.endpoint, moto_server.create_bucket())
    volume.mount()
    sizes = [3 * MiB, 2 * MiB + 12345, 700_000]
    for i, size in enumerate(sizes):
        write_random(volume.path / f"f{i}.bin", size)
    sync_wait(volume.path)
    volume.remount()

    s3 = status_json(volume.path)["tiers"]["s3"]
    assert s3["used"] >= sum(sizes), s3
    assert s3["used_from"] == "metadata", s3
    text = status_text(volume.path)
    assert re.search(r"s3\s+[\d.]+ MiB of", text), text
    assert "used: the volume's data by its metadata, less the uploads pending" in text, text


def test_counters_are_labelled_and_heat_is_explained(make_s3_volume, moto_server):
    volume = make_s3_volume(moto_server.endpoint, moto_server.create_bucket())
    volume.mount()
    (volume.path / "d").mkdir()
    write_random(volume.path / "d" / "hot.bin", 2 * MiB)
    volume.remount()
    names = os.listdir(volume.path / "d")  # entries the kernel may learn from the listing alone
    for _ in range(3):
        assert len((volume.path / "d" / names[0]).read_bytes()) == 2 * MiB
    text = status_text(volume.path)
    assert "readahead since mount" in text, text
    assert re.search(r"uploads .* since mount \d+ uploaded", text), text
    assert "hottest files (heat: 1 for each open or read of the file, halved every 600 s without use):" in text
    hottest = text.split("hottest files")[1].splitlines()[1]
    assert hottest.endswith("/d/hot.bin") or hottest.endswith("path not seen since mount"), hottest


def test_a_tier_that_is_not_configured_is_not_shown(tmp_path, watchdog):
    volume = Volume(tmp_path)
    volume.config.write_text(f'[volume]\nstate_dir = "{volume.state_dir}"\n\n'
                             '[[tiers]]\nkind = "nvme"\ncapacity = "1GiB"\n\n[[tiers]]\nkind = "objstore"\n')
    try:
        volume.mount()
        assert "ram" not in status_json(volume.path)["tiers"]
        text = status_text(volume.path)
        assert not any(line.strip().startswith("ram") for line in text.splitlines()), text
    finally:
        volume.close()
