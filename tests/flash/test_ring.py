"""Consistent hashing: adding or removing a server moves only its share of the blocks."""

from __future__ import annotations

from aifs.flash.ring import HashRing

BLOCKS = range(1, 20_001)
SERVERS = [f"10.0.0.{i}:7070" for i in range(1, 6)]


def primaries(ring: HashRing) -> dict[int, str]:
    return {b: ring.owners(b, 1)[0] for b in BLOCKS}


def test_adding_a_server_moves_only_its_share_to_it():
    ring = HashRing(SERVERS)
    before = primaries(ring)
    ring.add("10.0.0.6:7070")
    after = primaries(ring)
    moved = [b for b in BLOCKS if before[b] != after[b]]
    fraction = len(moved) / len(BLOCKS)
    assert 0.12 < fraction < 0.22, fraction  # its fair share is 1/6 ~ 0.167
    assert all(after[b] == "10.0.0.6:7070" for b in moved)  # nothing moves between old servers


def test_removing_a_server_moves_only_its_blocks():
    ring = HashRing(SERVERS)
    before = primaries(ring)
    ring.remove(SERVERS[2])
    after = primaries(ring)
    moved = [b for b in BLOCKS if before[b] != after[b]]
    assert {before[b] for b in moved} == {SERVERS[2]}
    assert 0.15 < len(moved) / len(BLOCKS) < 0.25  # its share was 1/5


def test_replica_sets_change_only_by_the_new_server():
    ring = HashRing(SERVERS)
    before = {b: set(ring.owners(b, 2)) for b in BLOCKS}
    ring.add("10.0.0.6:7070")
    changed = 0
    for b in BLOCKS:
        after = set(ring.owners(b, 2))
        assert after - {"10.0.0.6:7070"} <= before[b]
        changed += after != before[b]
    assert changed / len(BLOCKS) < 2 * 0.22  # each block has 2 copies, each moving with p ~ 1/6


def test_shares_are_balanced_and_owners_distinct():
    ring = HashRing(SERVERS)
    counts = dict.fromkeys(SERVERS, 0)
    for b in BLOCKS:
        owners = ring.owners(b, 3)
        assert len(set(owners)) == 3
        counts[owners[0]] += 1
    for server, count in counts.items():
        assert abs(count / len(BLOCKS) - 0.2) < 0.06, (server, count)


def test_skipped_servers_are_passed_over_in_ring_order():
    ring = HashRing(SERVERS)
    for b in range(1, 500):
        full = ring.owners(b, 5)
        assert ring.owners(b, 2, skip={full[0]}) == full[1:3]
        assert ring.owners(b, 9) == full  # never more than there are servers
    assert HashRing().owners(1, 2) == []
