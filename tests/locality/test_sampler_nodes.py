"""LocalitySampler on two nodes of one volume, after an epoch of DistributedSampler filled their
caches: every read of the next epoch is local (the tiers' own counters say so), where
DistributedSampler's next epoch reads a share from the other node; and ranks in separate
processes of a torch.distributed world agree on the nodes and the dealing by themselves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from flash.servers import child_env
from s3.conftest import free_port
from torch.utils.data.distributed import DistributedSampler

from aifs.dataflow.local_shares import holders_of
from aifs.dataflow.locate import locate
from aifs.torch.locality import LocalitySampler

from .conftest import SAMPLES, Cluster, NamedNode, settle

pytestmark = pytest.mark.timeout_s(240)

RANK_NODES = ["node-a", "node-a", "node-b", "node-b"]  # two ranks on each node
SEED = 7
LOCAL_TIERS = ("ram", "nvme")


def read_uncached(path: Path) -> None:
    """Read the file through the mount, not from the kernel's page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        while os.read(fd, 1 << 20):
            pass
    finally:
        os.close(fd)


def read_epoch(cluster: Cluster, shares: list[list[int]]) -> float:
    """Read each rank's share on its node; the fraction of the bytes its node's own tiers served."""
    nodes = {node.name: node for node in cluster.nodes}
    before = {name: tier_bytes(node) for name, node in nodes.items()}
    for rank, share in enumerate(shares):
        node = nodes[RANK_NODES[rank]]
        for sample in share:
            read_uncached(node.path / cluster.samples[sample])
    read = {name: {tier: n - before[name][tier] for tier, n in tier_bytes(node).items()}
            for name, node in nodes.items()}
    return sum(n for tiers in read.values() for tier, n in tiers.items() if tier in LOCAL_TIERS) / sum(
        n for tiers in read.values() for n in tiers.values())


def tier_bytes(node: NamedNode) -> dict[str, int]:
    return {name: tier["bytes_read"] for name, tier in node.control("stats")["tiers"].items()}


def dealt(sampler_of, epoch: int) -> list[list[int]]:
    shares = []
    for rank in range(len(RANK_NODES)):
        sampler = sampler_of(rank)
        sampler.set_epoch(epoch)
        shares.append(list(sampler))
    return shares


def local_share(shares: list[list[int]], holders: list[frozenset[str]]) -> float:
    local = sum(RANK_NODES[rank] in holders[s] for rank, share in enumerate(shares) for s in share)
    return local / sum(map(len, shares))


def located_holders(cluster: Cluster) -> list[frozenset[str]]:
    """The nodes holding each sample, as each node sees them: both must see the same."""
    views = [holders_of(locate(cluster.paths(node, cluster.samples))) for node in cluster.nodes]
    assert views[0] == views[1]
    return views[0]


@pytest.fixture(scope="module")
def after_one_epoch(cluster: Cluster) -> None:
    """Epoch 0 read by DistributedSampler's four ranks, each on its node."""
    read_epoch(cluster, dealt(lambda rank: DistributedSampler(range(SAMPLES), len(RANK_NODES), rank, seed=SEED), 0))
    for node in cluster.nodes:
        settle(node)


RANK = """
import json, sys
import torch.distributed as dist
from aifs.client import Dataset
from aifs.torch.locality import LocalitySampler
rank, port, root, names = int(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
sampler = LocalitySampler(Dataset([f"{root}/{name}" for name in names]), seed=int(sys.argv[5]))
sampler.set_epoch(1)
print(json.dumps({"rank_nodes": sampler.rank_nodes, "share": list(sampler)}))
dist.destroy_process_group()
"""


def test_ranks_of_a_distributed_world_agree_on_nodes_and_dealing(cluster: Cluster, after_one_epoch: None) -> None:
    """Rank 0 runs on node A's mount and rank 1 on node B's: each learns its node from its own
    mount, rank 0 locates the samples for both."""
    holders = located_holders(cluster)
    port = str(free_port())
    env = {**child_env(), "GLOO_SOCKET_IFNAME": "lo"}
    ranks = [subprocess.Popen([sys.executable, "-c", RANK, str(rank), port, str(node.path),
                               json.dumps(cluster.samples), str(SEED)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for rank, node in enumerate(cluster.nodes)]
    outputs = []
    for process in ranks:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        outputs.append(json.loads(out))
    assert [output["rank_nodes"] for output in outputs] == [["node-a", "node-b"]] * 2
    expected = []
    for rank in range(2):
        sampler = LocalitySampler(range(SAMPLES), 2, rank, seed=SEED, holders=holders, rank_nodes=["node-a", "node-b"])
        sampler.set_epoch(1)
        expected.append(list(sampler))
    assert [output["share"] for output in outputs] == expected
    assert sorted(outputs[0]["share"] + outputs[1]["share"]) == list(range(SAMPLES))
    assert all(name in holders[s] for output, name in zip(outputs, ("node-a", "node-b")) for s in output["share"])


def test_the_next_epoch_reads_locally_where_distributed_sampler_reads_from_the_other_node(
        cluster: Cluster, after_one_epoch: None) -> None:
    holders = located_holders(cluster)
    assert all(holders), "after one epoch every sample is on some node"
    locality = dealt(lambda rank: LocalitySampler(range(SAMPLES), len(RANK_NODES), rank, seed=SEED, holders=holders,
                                                  rank_nodes=RANK_NODES), 1)
    distributed = dealt(lambda rank: DistributedSampler(range(SAMPLES), len(RANK_NODES), rank, seed=SEED), 1)
    expected = {"LocalitySampler": local_share(locality, holders),
                "DistributedSampler": local_share(distributed, holders)}
    measured = {"LocalitySampler": read_epoch(cluster, locality)}
    measured["DistributedSampler"] = read_epoch(cluster, distributed)  # second: its remote reads fill caches
    print(f"\nlocal reads in epoch 1, by the holdings: {expected}; by the tiers' counters: {measured}")
    assert expected["LocalitySampler"] == measured["LocalitySampler"] == 1.0
    assert measured["DistributedSampler"] == pytest.approx(expected["DistributedSampler"])
    assert measured["DistributedSampler"] < 1.0
