"""`aifs locate` on two nodes of one volume: what it reports for each node is what that node's
own tiers hold, after files were read on one node only; --by-node ranks the nodes and gives
a node affinity Kubernetes accepts and a Slurm node list; a node that does not answer is
unknown rather than fatal; bad paths and dead mounts get one line."""

from __future__ import annotations

import json
import os
import signal
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from conftest import aifs_cli

from aifs.dataflow.placement import MAX_WEIGHT

from .conftest import FILES, Cluster, NamedNode, settle

pytestmark = pytest.mark.timeout_s(240)

TIERS = ("ram", "nvme")


def aifs_locate(*args: str) -> str:
    cp = aifs_cli("locate", *args, timeout=60)
    assert cp.returncode == 0, f"aifs locate {' '.join(args)}: exit {cp.returncode}\n{cp.stdout}\n{cp.stderr}"
    return cp.stdout


def resident(node: NamedNode, path: Path, tier: str) -> int:
    """Bytes of the file that `tier` of `node` holds, by the node's own account."""
    report = node.control("resident", inodes=[os.stat(path).st_ino], tier=tier)
    return report["bytes"] - report["missing_bytes"]


@dataclass
class Held:
    """Bytes of each file of the cluster's data/ by node and tier, as each node's tiers say."""

    by_tier: dict[str, dict[str, list[int]]]  # node: tier: bytes of each file
    read: list[str]

    def of(self, node: str) -> list[int]:
        """What the node holds in either tier: everything a node reads or is offered lands on its
        NVMe, so the larger of its two counts."""
        return [max(counts) for counts in zip(*self.by_tier[node].values())]


@pytest.fixture(scope="module")
def read_on_b(cluster: Cluster) -> Held:
    """Half the small files and the big one read on node B only; B has sent the blocks it
    offers node A (those consistent hashing places there)."""
    a, b = cluster.nodes
    read = cluster.files[:FILES // 2] + ["data/big"]
    for path in cluster.paths(b, read):
        path.read_bytes()
    settle(b)
    by_tier = {node.name: {tier: [resident(node, path, tier) for path in cluster.paths(node)] for tier in TIERS}
               for node in cluster.nodes}
    return Held(by_tier, read)


def test_each_file_is_reported_where_each_nodes_tiers_hold_it(cluster: Cluster, read_on_b: Held) -> None:
    a, b = cluster.nodes
    sizes = [os.stat(path).st_size for path in cluster.paths(a)]
    held_a, held_b = read_on_b.of("node-a"), read_on_b.of("node-b")
    assert held_b == [size if name in read_on_b.read else 0 for name, size in zip(cluster.files, sizes)]
    offered = {name for name, held in zip(cluster.files, held_a) if held}
    assert offered and offered < set(read_on_b.read), "A holds some of what B read (B's offers), nothing else"
    for node in cluster.nodes:
        found = json.loads(aifs_locate("--json", *map(str, cluster.paths(node))))
        for i, where in enumerate(found):
            assert where == {
                "path": str(cluster.paths(node)[i]), "node": node.name, "files": 1, "bytes": sizes[i],
                "ram": read_on_b.by_tier[node.name]["ram"][i], "nvme": read_on_b.by_tier[node.name]["nvme"][i],
                "nodes": {"node-a": held_a[i], "node-b": held_b[i]}, "flash": None, "durable": sizes[i],
                "durable_tier": "s3", "unknown": {}, "unreadable": []}, cluster.files[i]
        tree = json.loads(aifs_locate("--json", str(node.path / "data")))[0]
        assert (tree["files"], tree["bytes"], tree["nodes"]) == (
            FILES + 1, sum(sizes), {"node-a": sum(held_a), "node-b": sum(held_b)})


def test_the_table_names_this_node_and_every_place(cluster: Cluster, read_on_b: Held) -> None:
    a, b = cluster.nodes
    lines = aifs_locate(str(b.path / "data" / "big")).splitlines()
    assert lines[0] == f"{b.path / 'data' / 'big'}: 1 file, 3.0 MiB"
    assert lines[1].split()[:4] == ["node-b", "3.0", "MiB", "100.0%"] and "this node" in lines[1]
    assert lines[2].split()[0] == "node-a" and "this node" not in lines[2]
    assert lines[3].split() == ["s3", "3.0", "MiB", "100.0%"]


def test_by_node_ranks_the_nodes_for_kubernetes_and_slurm(cluster: Cluster, read_on_b: Held) -> None:
    a, _ = cluster.nodes
    data = str(a.path / "data")
    held = {name: sum(read_on_b.of(name)) for name in ("node-a", "node-b")}
    ranking = json.loads(aifs_locate("--by-node", "--json", data))
    assert ranking["nodes"] == [{"node": name, "bytes": held[name]} for name in ("node-b", "node-a")]
    assert ranking["unknown"] == {} and ranking["slurm"] == {"nodelist": "node-b,node-a"}
    terms = ranking["kubernetes"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [t["weight"] for t in terms] == [MAX_WEIGHT, max(1, round(MAX_WEIGHT * held["node-a"] / held["node-b"]))]
    assert [t["preference"]["matchExpressions"] for t in terms] == [
        [{"key": "kubernetes.io/hostname", "operator": "In", "values": [name]}] for name in ("node-b", "node-a")]
    for version in ("1.25.0", "1.37.0"):
        kubernetes_validate.validate(_pod(ranking["kubernetes"]["affinity"]), version, strict=True)
    top = json.loads(aifs_locate("--by-node", "--top", "1", "--json", data))
    assert [n["node"] for n in top["nodes"]] == ["node-b"] and top["slurm"]["nodelist"] == "node-b"
    text = aifs_locate("--by-node", data)
    snippet = text.split("Kubernetes (a pod spec's affinity):\n")[1].split("\n\n")[0]
    assert yaml.safe_load(snippet) == {"affinity": ranking["kubernetes"]["affinity"]}
    assert "--nodelist=node-b,node-a" in text


def _pod(affinity: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer"},
            "spec": {"affinity": affinity, "containers": [{"name": "train", "image": "trainer:1"}]}}


def test_a_node_that_does_not_answer_is_unknown_and_the_rest_is_reported(cluster: Cluster, read_on_b: Held) -> None:
    a, b = cluster.nodes
    frozen = b.daemon_pids()
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        found = json.loads(aifs_locate("--json", str(a.path / "data")))[0]
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    assert set(found["unknown"]) == {"node-b"}, found["unknown"]
    assert found["nodes"] == {"node-a": sum(read_on_b.of("node-a"))}
    assert found["files"] == FILES + 1


def test_paths_off_aifs_missing_paths_and_dead_mounts_get_one_line(cluster: Cluster, tmp_path: Path,
                                                                    make_volume) -> None:
    a, _ = cluster.nodes
    _refused(["locate", str(tmp_path)], 1, f"aifs: {tmp_path} is not on an aifs mount")
    _refused(["locate", str(a.path / "nope")], 1, f"aifs: cannot read {a.path / 'nope'}: No such file or directory")
    _refused(["locate", "--top", "2", str(a.path)], 2,
             "aifs: --top limits the ranking of --by-node; give both, or neither")
    alone = make_volume("alone")
    try:
        (alone.path / "f").write_bytes(b"x" * 1000)
        found = json.loads(aifs_locate("--json", str(alone.path)))[0]
        host = socket.gethostname()
        assert (found["node"], found["nodes"], found["durable_tier"]) == (host, {host: 1000}, "objstore")
        for pid in alone.daemon_pids():
            os.kill(pid, signal.SIGKILL)
        _refused(["locate", str(alone.path / "f")], 1,
                 f"aifs: no aifs mount is running for {alone.state_dir} (no answer on {alone.state_dir}/control.sock)")
    finally:
        alone.close()


def _refused(args: list[str], code: int, line: str) -> None:
    cp = aifs_cli(*args, timeout=60)
    assert (cp.returncode, cp.stderr, cp.stdout) == (code, line + "\n", ""), cp


def test_a_node_the_caller_found_silent_is_not_asked_again(cluster: Cluster, read_on_b: Held) -> None:
    """Later batches of one `aifs locate` pass the nodes that did not answer an earlier one."""
    a, _ = cluster.nodes
    big = a.path / "data" / "big"
    answer = a.control("locate", inodes=[os.stat(big).st_ino], skip=["node-b"])
    assert answer["unknown"] == {"node-b": "did not answer an earlier request of this locate"}
    assert answer["files"][0]["nodes"] == {"node-a": read_on_b.of("node-a")[cluster.files.index("data/big")]}
