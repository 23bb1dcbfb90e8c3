"""Dealing an epoch's samples to ranks so that each rank reads, as far as it can, samples its
own node holds (aifs.torch.LocalitySampler deals with it; no torch here).

Every rank gets an equal share, and the shares together are exactly the samples dealt. Which
samples go to which node is a transport problem: a node has room for its ranks' shares, and
a sample may go to any node that holds it. The most samples that can go to a node holding
them is a maximum flow, found by augmenting paths over groups of samples with the same
holders (a handful of groups for any number of samples), starting from a greedy fill, so a
dealing in which every sample is local is found whenever one exists. The samples no node can
take locally fill the room left. Within a node, its samples go round the node's ranks in the
epoch's order. The dealing depends on its inputs alone: every rank computes the same one
without a word to the others.
"""

from collections import defaultdict, deque
from collections.abc import Collection, Mapping, Sequence

from aifs.dataflow.locate import Location

Group = tuple[str, ...]  # the nodes that hold a sample, sorted
Flow = dict[tuple[Group, str], int]  # (group, node): samples of the group that node takes


def holders_of(locations: Sequence[Location]) -> list[frozenset[str]]:
    """For each location, the nodes that hold the most of its bytes (none when none holds any)."""
    found = []
    for where in locations:
        most = max(where.nodes.values(), default=0)
        found.append(frozenset(node for node, held in where.nodes.items() if most and held == most))
    return found


def deal(order: Sequence[int], rank_nodes: Sequence[str], holders: Sequence[Collection[str]]) -> list[list[int]]:
    """Each rank's share of the samples in `order` (as many for each rank), in `order`'s order;
    `rank_nodes[r]` is rank r's node, `holders[s]` the nodes that hold sample s."""
    ranks = len(rank_nodes)
    if len(order) % ranks:
        raise ValueError(f"{len(order)} samples cannot be dealt equally to {ranks} ranks")
    ranks_of: dict[str, list[int]] = defaultdict(list)
    for rank, node in enumerate(rank_nodes):
        ranks_of[node].append(rank)
    room = {node: len(order) // ranks * len(of) for node, of in ranks_of.items()}
    groups: dict[Group, list[int]] = defaultdict(list)  # holders: positions in `order`
    for position, sample in enumerate(order):
        groups[tuple(sorted(room.keys() & holders[sample]))].append(position)
    placed = _place(groups, room)
    shares: list[list[int]] = [[] for _ in range(ranks)]
    for node, positions in placed.items():
        for i, position in enumerate(sorted(positions)):
            shares[ranks_of[node][i % len(ranks_of[node])]].append(order[position])
    return shares


def _place(groups: Mapping[Group, list[int]], room: Mapping[str, int]) -> dict[str, list[int]]:
    """The positions each node takes: as many held ones as can be, then the rest in order."""
    flow = most_local({group: len(positions) for group, positions in groups.items() if group}, room)
    placed: dict[str, list[int]] = {node: [] for node in room}
    rest: list[int] = []
    for group, positions in groups.items():
        taken = 0
        for node in group:
            count = flow.get((group, node), 0)
            placed[node] += positions[taken:taken + count]
            taken += count
        rest += positions[taken:]
    rest.sort()
    for node in sorted(room):
        gap = room[node] - len(placed[node])
        placed[node] += rest[:gap]
        rest = rest[gap:]
    return placed


def most_local(supply: Mapping[Group, int], room: Mapping[str, int]) -> Flow:
    """How many samples of each group each of its nodes takes, the most in all, within each
    node's room: a greedy fill, then augmenting paths until there is none."""
    flow: Flow = defaultdict(int)
    sent = dict.fromkeys(supply, 0)
    used = dict.fromkeys(room, 0)
    for group, count in supply.items():
        for node in group:
            moved = min(count - sent[group], room[node] - used[node])
            if moved > 0:
                flow[group, node] += moved
                sent[group] += moved
                used[node] += moved
    while (path := _augmenting_path(supply, room, flow, sent, used)) is not None:
        _augment(path, supply, room, flow, sent, used)
    return {edge: count for edge, count in flow.items() if count}


def _augmenting_path(supply: Mapping[Group, int], room: Mapping[str, int], flow: Flow, sent: dict[Group, int],
                     used: dict[str, int]) -> list[tuple[Group, str]] | None:
    """A shortest path group, node, group, node... from a group with samples left to a node
    with room left, each node reached from a group it holds, and each group after a node
    reached back along samples that node takes now; as (group, node) steps."""
    came_from: dict[str, Group] = {}  # node: the group it was reached from
    reached_by: dict[Group, str | None] = {g: None for g in supply if sent[g] < supply[g]}
    queue = deque(reached_by)
    while queue:
        group = queue.popleft()
        for node in group:
            if node in came_from:
                continue
            came_from[node] = group
            if used[node] < room[node]:
                return _steps(node, came_from, reached_by)
            for other in supply:
                if other not in reached_by and flow.get((other, node), 0) > 0:
                    reached_by[other] = node
                    queue.append(other)
    return None


def _steps(node: str, came_from: dict[str, Group], reached_by: dict[Group, str | None]) -> list[tuple[Group, str]]:
    steps = []
    current: str | None = node
    while current is not None:
        group = came_from[current]
        steps.append((group, current))
        current = reached_by[group]
    return steps[::-1]


def _augment(path: list[tuple[Group, str]], supply: Mapping[Group, int], room: Mapping[str, int], flow: Flow,
             sent: dict[Group, int], used: dict[str, int]) -> None:
    """Move as many samples as the path allows: the first group sends more, each node in the
    middle gives samples of the group after it back for the group before, the last node takes more."""
    first, last = path[0][0], path[-1][1]
    moved = min([supply[first] - sent[first], room[last] - used[last]]
                + [flow[group, node] for (_, node), (group, _) in zip(path, path[1:])])
    for group, node in path:
        flow[group, node] += moved
    for (_, node), (group, _) in zip(path, path[1:]):
        flow[group, node] -= moved
    sent[first] += moved
    used[last] += moved
