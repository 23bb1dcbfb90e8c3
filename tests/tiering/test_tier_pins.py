"""Pins inside the RAM and NVMe tiers: never evicted, counted against the budget, released by unpin."""

from __future__ import annotations

from aifs.tiers.nvme import NvmeTier
from aifs.tiers.ram import RamTier

KiB = 1 << 10


def block(i: int, size: int = 64 * KiB) -> bytes:
    return bytes([i % 256]) * size


def test_ram_pinned_blocks_survive_any_load_and_count_against_the_budget():
    ram = RamTier(8 * 64 * KiB)
    ram.put(1, block(1))
    ram.pin([1, 2])
    ram.put(2, block(2))
    for i in range(10, 200):  # a scan and a re-read hot set, far more than the budget
        ram.put(i, block(i))
        ram.get(i)
        assert ram.used() <= ram.capacity
    assert ram.get(1) == block(1) and ram.get(2) == block(2)
    assert ram.pinned_bytes() == 2 * 64 * KiB
    ram.unpin([1, 2])
    assert ram.pinned_bytes() == 0
    for i in range(300, 320):
        ram.put(i, block(i))
    assert not ram.contains(1) and not ram.contains(2)


def test_ram_refuses_to_pin_past_its_budget():
    ram = RamTier(2 * 64 * KiB)
    ram.pin([1, 2, 3])
    for i in (1, 2, 3):
        ram.put(i, block(i))
    assert ram.pinned_bytes() == 2 * 64 * KiB
    assert ram.used() <= ram.capacity


def test_nvme_never_evicts_pinned_blocks(tmp_path):
    nvme = NvmeTier(tmp_path, 4 * 64 * KiB)
    nvme.put(1, block(1))
    nvme.pin([1, 2])
    nvme.put(2, block(2), dirty=True)
    nvme.mark_clean(2)  # uploaded: clean, but still pinned
    for i in range(10, 30):
        nvme.put(i, block(i))
        assert nvme.used() <= nvme.capacity
    assert nvme.get(1) == block(1) and nvme.get(2) == block(2)
    assert nvme.pinned_bytes() == 2 * 64 * KiB
    nvme.unpin([1, 2])
    for i in range(30, 40):
        nvme.put(i, block(i))
    assert not nvme.contains(1) and not nvme.contains(2)
    nvme.close()
