"""aifs fsck on NVMe segments whose record headers are damaged, on a small volume built
through MetaEngine and the tier classes: /big (three blocks, uploaded to the object store)
and /small (one block, pending upload: on NVMe only).

Damaged bytes that hold only blocks the object store has are reported and neutralised by
--repair; a damaged record of a block only NVMe had, whose bytes no longer match, is named
by file and cannot be repaired, and the block check reports its bytes lost, naming the tiers.
"""

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
from conftest import aifs_cli
from test_fsck import BLOCK, stage

from aifs.meta import MetaEngine
from aifs.meta.engine import ROOT_INO
from aifs.tiers.nvme import NvmeTier
from aifs.tiers.objstore import LocalObjectStore
from aifs.tiers.records import HEADER

SHARDS = 4
FILE = stat.S_IFREG | 0o644


class SmallVolume:
    def __init__(self, base: Path) -> None:
        self.state = base / "state"
        self.config = base / "aifs.toml"
        self.config.write_text(f'[volume]\nstate_dir = "{self.state}"\nblock_size = "64KiB"\n\n'
                               f"[meta]\nshards = {SHARDS}\n")
        self.blocks: dict[str, list[int]] = {}
        meta = MetaEngine.open(self.state / "meta", SHARDS, BLOCK)
        nvme = NvmeTier(self.state / "nvme", 1 << 30)
        cold = LocalObjectStore(self.state / "objects", 1 << 30)
        try:
            big = self._write(meta, nvme, "big", os.urandom(3 * BLOCK))
            for block_id in big:
                cold.put(block_id, nvme.get(block_id))
            meta.uploads_done(big)
            self._write(meta, nvme, "small", b"small file")
        finally:
            nvme.close()
            meta.close()

    def _write(self, meta: MetaEngine, nvme: NvmeTier, name: str, data: bytes) -> list[int]:
        refs = stage(meta, nvme, meta.create(ROOT_INO, name.encode(), FILE, 0, 0)[0], data)
        self.blocks[name] = [ref.block_id for ref in refs.values()]
        return self.blocks[name]

    def record_header(self, block_id: int) -> tuple[Path, int]:
        """(segment file, offset) of the header of the NVMe record of a block, found by its bytes."""
        nvme = NvmeTier(self.state / "nvme", 1 << 30, read_only=True)
        data = nvme.get(block_id)
        nvme.close()
        for segment in sorted((self.state / "nvme").glob("seg-*.log")):
            at = segment.read_bytes().find(data)
            if at >= 0:
                return segment, at - HEADER.size
        raise AssertionError(f"block {block_id:016x} is in no NVMe segment")

    def digest(self) -> dict[str, str]:
        return {str(p.relative_to(self.state)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(self.state.rglob("*")) if p.is_file()}

    def fsck(self, *args: str) -> tuple[int, list[dict]]:
        cp = aifs_cli("fsck", "-c", str(self.config), "--json", *args, timeout=120)
        assert cp.returncode in (0, 1), f"fsck could not run (exit {cp.returncode}):\n{cp.stdout}\n{cp.stderr}"
        return cp.returncode, [json.loads(line) for line in cp.stdout.splitlines()][:-1]


@pytest.fixture
def volume(tmp_path: Path) -> SmallVolume:
    return SmallVolume(tmp_path)


def flip(path: Path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))


def test_damaged_bytes_holding_only_uploaded_blocks_are_neutralised(volume: SmallVolume) -> None:
    second = volume.blocks["big"][1]
    segment, offset = volume.record_header(second)
    flip(segment, offset + 1)
    before = volume.digest()
    code, findings = volume.fsck("--verify")
    assert volume.digest() == before, "a check without --repair changed the state directory"
    assert code == 1 and [(f["kind"], f["fix"]) for f in findings] == [("damaged-region", "neutralise it")], findings
    assert findings[0]["subject"].startswith(f"{segment} bytes [{offset}, ")
    assert f"its header names block {second:016x}" in findings[0]["subject"]

    code, findings = volume.fsck("--repair")
    assert code == 0 and [(f["kind"], f["repaired"]) for f in findings] == [("damaged-region", True)], findings
    assert volume.fsck("--verify") == (0, [])


def test_a_damaged_record_of_a_block_only_nvme_had_is_named_and_reported_lost(volume: SmallVolume) -> None:
    small = volume.blocks["small"][0]
    segment, offset = volume.record_header(small)
    flip(segment, offset + 1)
    flip(segment, offset + HEADER.size + 3)  # its bytes rotted too
    for args in ((), ("--repair",)):
        code, findings = volume.fsck(*args)
        assert code == 1
        assert [(f["kind"], f["block"], f["fix"]) for f in findings] == [
            ("damaged-record", small, None), ("missing-block", small, None)], findings
        damaged, missing = (f["subject"] for f in findings)
        assert damaged.startswith("/small bytes [0, 10)") and f"object {small:016x}" in damaged
        assert damaged.endswith(f"record in {segment} at offset {offset}")
        assert missing.startswith("/small bytes [0, 10)")
        assert "its object is in no tier (nvme, objstore)" in findings[1]["meaning"]
