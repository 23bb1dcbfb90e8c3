"""LocalitySampler's promises, for any dataset size, ranks, nodes and holdings: each epoch
deals exactly DistributedSampler's samples (a permutation of the whole dataset when it
divides evenly) in equal shares; the same seed and epoch deal the same; another epoch deals
another order; and when every sample can be read where it is held, every sample is."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data.distributed import DistributedSampler

from aifs.torch.locality import LocalitySampler

NODES = ("n0", "n1", "n2", "n3")
EXAMPLES = settings(max_examples=100, deadline=None, derandomize=True)


@st.composite
def layouts(draw, min_size: int = 0) -> dict:
    """A dataset size, the node of each rank, the nodes holding each sample, and the sampler's options."""
    ranks = draw(st.integers(1, 8))
    size = draw(st.integers(min_size, 60))
    nodes = NODES[:draw(st.integers(1, len(NODES)))]
    return {"size": size, "rank_nodes": draw(st.lists(st.sampled_from(nodes), min_size=ranks, max_size=ranks)),
            "holders": draw(st.lists(st.frozensets(st.sampled_from(nodes)), min_size=size, max_size=size)),
            "shuffle": draw(st.booleans()), "seed": draw(st.integers(0, 2**31)), "drop_last": draw(st.booleans())}


def shares(layout: dict, epoch: int) -> list[list[int]]:
    """Every rank's samples for `epoch`."""
    dealt = []
    for rank in range(len(layout["rank_nodes"])):
        sampler = LocalitySampler(range(layout["size"]), len(layout["rank_nodes"]), rank, layout["shuffle"],
                                  layout["seed"], layout["drop_last"], holders=layout["holders"],
                                  rank_nodes=layout["rank_nodes"])
        sampler.set_epoch(epoch)
        dealt.append(list(sampler))
        assert len(sampler) == len(dealt[-1])
    return dealt


def distributed(layout: dict, epoch: int) -> list[list[int]]:
    dealt = []
    for rank in range(len(layout["rank_nodes"])):
        sampler = DistributedSampler(range(layout["size"]), len(layout["rank_nodes"]), rank, layout["shuffle"],
                                     layout["seed"], layout["drop_last"])
        sampler.set_epoch(epoch)
        dealt.append(list(sampler))
    return dealt


def local_count(dealt: list[list[int]], layout: dict) -> int:
    return sum(layout["rank_nodes"][rank] in layout["holders"][s] for rank, share in enumerate(dealt) for s in share)


@EXAMPLES
@given(layouts(), st.integers(0, 1000))
def test_an_epoch_deals_distributed_samplers_samples_in_equal_shares(layout: dict, epoch: int) -> None:
    dealt = shares(layout, epoch)
    expected = distributed(layout, epoch)
    assert len({len(share) for share in dealt}) <= 1, "equal shares"
    assert Counter(s for share in dealt for s in share) == Counter(s for share in expected for s in share)
    if layout["size"] % len(layout["rank_nodes"]) == 0:
        assert sorted(s for share in dealt for s in share) == list(range(layout["size"])), "a permutation"
    assert local_count(dealt, layout) >= local_count(expected, layout)


@EXAMPLES
@given(layouts(), st.integers(0, 1000))
def test_the_seed_and_epoch_decide_the_dealing(layout: dict, epoch: int) -> None:
    assert shares(layout, epoch) == shares(layout, epoch)


@EXAMPLES
@given(layouts(min_size=24).filter(lambda layout: layout["shuffle"]), st.integers(0, 1000))
def test_another_epoch_deals_another_order(layout: dict, epoch: int) -> None:
    order = [s for share in shares(layout, epoch) for s in share]
    assert order != [s for share in shares(layout, epoch + 1) for s in share]


@st.composite
def perfectly_local(draw) -> dict:
    """A layout in which some dealing reads every sample on a node that holds it: each sample
    is first given a node with room for it, which holds it, and other nodes may hold it too."""
    layout = draw(layouts())
    ranks = len(layout["rank_nodes"])
    per_rank = draw(st.integers(0, 8))
    slots = draw(st.permutations([node for node in layout["rank_nodes"] for _ in range(per_rank)]))
    nodes = sorted(set(layout["rank_nodes"]))
    extra = draw(st.lists(st.frozensets(st.sampled_from(nodes)), min_size=len(slots), max_size=len(slots)))
    return {**layout, "size": ranks * per_rank, "holders": [extra[i] | {slots[i]} for i in range(len(slots))]}


@EXAMPLES
@given(perfectly_local(), st.integers(0, 1000))
def test_a_dealing_where_every_sample_is_local_is_found_when_one_exists(layout: dict, epoch: int) -> None:
    dealt = shares(layout, epoch)
    assert local_count(dealt, layout) == layout["size"]
