"""The NVMe tier at mount, with damaged segment records: what recover() makes of them
given the pending uploads (block id -> checksum)."""

import logging

from aifs.tiers import nvme as nvme_module
from aifs.tiers.checksum import checksum
from aifs.tiers.nvme import NvmeTier
from aifs.tiers.records import HEADER

from .conftest import block

KB = 1024


def flip(path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))


def staged(root, *block_ids: int) -> dict[int, int]:
    """Blocks staged on a fresh tier, and where each record's header is (found by its bytes)."""
    tier = NvmeTier(root, 1 << 20)
    for block_id in block_ids:
        tier.put(block_id, block(block_id, KB), dirty=True)
    tier.close()
    (segment,) = root.glob("seg-*.log")
    raw = segment.read_bytes()
    return {b: raw.find(block(b, KB)) - HEADER.size for b in block_ids}


def test_a_pending_block_that_cannot_be_recovered_is_reported_and_left_in_place(tmp_path, caplog):
    where = staged(tmp_path, 1, 2, 3)
    (segment,) = tmp_path.glob("seg-*.log")
    flip(segment, where[2] + 1)
    flip(segment, where[2] + HEADER.size + 5)  # its bytes rotted too
    damaged = segment.read_bytes()
    pending = {b: checksum(block(b, KB)) for b in (1, 2, 3)}
    with caplog.at_level(logging.WARNING, logger=nvme_module.__name__):
        tier = NvmeTier(tmp_path, 1 << 20)
        assert tier.recover(pending) == []
    assert [tier.contains(b) for b in (1, 2, 3)] == [True, False, True]
    assert tier.get(3) == block(3, KB), "the record after the damaged one was lost"
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "block 0000000000000002" in errors[0] and "is lost" in errors[0]
    assert f"{segment} bytes [{where[2]}, {where[3]})" in errors[0]
    tier.close()
    assert segment.read_bytes() == damaged, "the damaged record was not left as it was"


def test_damaged_bytes_nobody_needs_are_neutralised(tmp_path, caplog):
    where = staged(tmp_path, 1, 2, 3)
    (segment,) = tmp_path.glob("seg-*.log")
    flip(segment, where[2] + 1)
    with caplog.at_level(logging.WARNING, logger=nvme_module.__name__):
        tier = NvmeTier(tmp_path, 1 << 20)
        assert tier.recover({3: checksum(block(3, KB))}) == [1]  # a leftover; 2 is uploaded
    assert "held no block waiting for upload: marked dead" in caplog.text
    assert tier.get(3) == block(3, KB) and not tier.contains(2)
    tier.close()
    again = NvmeTier(tmp_path, 1 << 20)
    assert not again.damaged and again.block_ids() == [3]
    again.close()
