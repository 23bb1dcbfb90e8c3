"""From bytes held per node to what schedulers take: the nodes ranked, a Kubernetes node
affinity that prefers them in proportion to what they hold, and a Slurm node list in that
order.

Kubernetes weighs each preferred term from 1 to 100 and adds the weights of the terms a node
matches, so each holding node gets a term of its own: the node holding the most weighs 100,
the others in proportion (at least 1, as a node that holds something beats one that holds
nothing). Nodes are matched by the `kubernetes.io/hostname` label, which is the node's host
name: the name each mount records. Slurm's --nodelist requires every node it lists, so a job
of N nodes takes the first N of the ranking (`top`).
"""

import json
from collections.abc import Mapping

HOSTNAME_LABEL = "kubernetes.io/hostname"
MAX_WEIGHT = 100

Ranking = list[tuple[str, int]]  # (node, bytes held), most first


def rank_nodes(held: Mapping[str, int], top: int | None = None) -> Ranking:
    """The nodes that hold anything, most bytes first (ties by name); the first `top` of them."""
    ranking = sorted(((node, n) for node, n in held.items() if n > 0), key=lambda item: (-item[1], item[0]))
    return ranking[:top] if top is not None else ranking


def node_affinity(ranking: Ranking) -> dict:
    """A pod spec's `affinity`: each node of the ranking preferred by weight."""
    most = ranking[0][1] if ranking else 0
    terms = [{"weight": max(1, round(MAX_WEIGHT * n / most)),
              "preference": {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}]}}
             for node, n in ranking]
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}}


def slurm_nodelist(ranking: Ranking) -> str:
    """The value of sbatch/srun --nodelist."""
    return ",".join(node for node, _ in ranking)


def to_yaml(value: object, indent: int = 0) -> str:
    """YAML of plain maps, lists and scalars, block style; strings are quoted as JSON quotes
    them (valid YAML), so no host name is ever read as a number or a boolean."""
    pad = " " * indent
    if isinstance(value, dict):
        return "".join(f"{pad}{key}:{_after_key(item, indent)}" for key, item in value.items())
    if isinstance(value, list):
        return "".join(f"{pad}- {to_yaml(item, indent + 2).lstrip()}" for item in value)
    return f"{pad}{json.dumps(value)}\n"


def _after_key(item: object, indent: int) -> str:
    """A nested map or list on the lines below its key; anything else (an empty one too) after it."""
    if isinstance(item, (dict, list)) and item:
        return "\n" + to_yaml(item, indent + 2)
    return f" {json.dumps(item)}\n"
