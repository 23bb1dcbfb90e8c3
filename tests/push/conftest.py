"""A mounted volume whose blocks (64 KiB, two copies) are held by flash servers that run
transforms, as real processes on 127.0.0.1; and JSON Lines files whose records cross many
block boundaries, some of them longer than a block."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import Volume, aifs_cli  # tests/conftest.py
from tests.flash.servers import ServerProcess, new_secret_file, start_all
from tests.flash.test_mount_remote import remote_volume, remount_with_nvme_wiped, server_objects

BLOCK = 64 << 10
HOLD_TIMEOUT_S = 30.0
TRANSFORMS = ("--transforms", "filter,mask,tokenize")

WORDS = "the data flows to compute where blocks live and only results travel back".split()


def record(rng: random.Random, i: int) -> dict:
    """A record with a language, a score and text with e-mail addresses and phone numbers in it;
    a few span more than two blocks."""
    words = rng.choices(WORDS, k=rng.randint(3, 60) if i % 500 != 250 else BLOCK // 2)  # whole blocks inside
    words.insert(rng.randrange(len(words)), f"user{i}@example.org")
    words.insert(rng.randrange(len(words)), f"+1 555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}")
    return {"id": i, "lang": rng.choice(["en", "en", "de", "fr"]), "score": round(rng.random(), 3),
            "meta": {"source": rng.choice(["web", "books"])}, "text": " ".join(words)}


def jsonl(seed: int, count: int, final_newline: bool = True) -> bytes:
    rng = random.Random(seed)
    lines = [json.dumps(record(rng, i)) for i in range(count)]
    lines.insert(count // 2, "not a json record")
    lines.insert(count // 3, "")
    return ("\n".join(lines) + ("\n" if final_newline else "")).encode()


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.2)


@dataclass
class PushSetup:
    volume: Volume
    servers: list[ServerProcess]
    files: dict[str, bytes]  # name under `source`: content

    @property
    def source(self) -> Path:
        return self.volume.path / "raw"

    def blocks(self) -> int:
        return sum(-(-len(data) // BLOCK) for data in self.files.values())


@pytest.fixture(scope="module")
def pushed(tmp_path_factory) -> PushSetup:
    """Three servers (the third runs only filter) and a mount whose blocks they all hold, mounted
    anew with its local tiers wiped."""
    base = tmp_path_factory.mktemp("push")
    secret_file = new_secret_file(base / "volume.secret")
    options = (TRANSFORMS, TRANSFORMS, ("--transforms", "filter"))
    servers = start_all([ServerProcess(base / f"s{i}", secret_file=secret_file, options=options[i])
                         for i in range(3)])
    volume = remote_volume(base / "vol", servers, "replicas = 2")
    config = volume.config.read_text()
    assert 'block_size = "1MiB"' in config
    volume.config.write_text(config.replace('block_size = "1MiB"', 'block_size = "64KiB"'))
    files = {"a.jsonl": jsonl(1, 2000), "b.jsonl": jsonl(2, 1500, final_newline=False)}
    setup = PushSetup(volume, servers, files)
    try:
        volume.mount()
        setup.source.mkdir()
        for name, data in files.items():
            (setup.source / name).write_bytes(data)
        assert aifs_cli("sync", "--wait", str(volume.path)).returncode == 0
        addresses = [s.address for s in servers]
        wait_until(lambda: server_objects(addresses, servers[0].secret) >= 2 * setup.blocks(), HOLD_TIMEOUT_S,
                   "the servers hold two copies of every block")
        remount_with_nvme_wiped(volume)  # blocks this node holds are transformed here, not sent
        yield setup
    finally:
        volume.close()
        for server in servers:
            server.kill()
