"""Where the bytes of files are: this node's RAM and NVMe, every other node of a shared
volume, the flash servers and the durable tier (the `locate` control operation).

The other nodes are asked over the channel the nodes already share, their block servers
(aifs.cluster.holdings), and only about the blocks of the files in question. A node that does
not answer within PEER_WAIT_S, that serves no blocks, whose block server this node's peers
tier has found down, or that the caller already found silent (`skip`), is listed among the
unknown places: a request never fails, nor waits long, for one node. Nodes are named as
schedulers name them: by the host name each mount recorded in its session. Mounts that share
a host name are one node, which holds what any of them holds.
"""

import socket
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import trio

from aifs.cluster.holdings import NoAnswer, held_among, held_by_peer
from aifs.meta.attrs import BlockRef
from aifs.rdma.auth import Secret
from aifs.vfs.volume import Volume

PEER_WAIT_S = 5.0  # how long one request waits for the other nodes and the flash servers
PLACES_AT_ONCE = 8  # places asked at the same time (each with a few threads of its own)
FLASH = "flash servers"  # their name among the places: no host is named so

Ask = Callable[[Sequence[int], float], set[int]]  # (block ids, deadline) -> those held; raises NoAnswer


@dataclass
class _Known:
    """What one place holds of the blocks asked about, or why nobody knows."""

    held: set[int] | None
    problem: str = ""


class Locator:
    def __init__(self, volume: Volume) -> None:
        self.vol = volume
        secret_file = volume.config.cluster.secret_file
        self._secret = Secret.from_file(secret_file) if secret_file is not None else None

    @property
    def node(self) -> str:
        """This node's name: the host name its session records (the machine's, on a volume of one node)."""
        return self.vol.cluster.session.info.host if self.vol.cluster is not None else socket.gethostname()

    async def locate(self, files: list[int], skip: list[str]) -> dict:
        """Bytes of each file by place; the nodes in `skip` are not asked (they are unknown)."""
        refs = {ino: list(self.vol.meta.all_block_refs(ino).values()) for ino in files}
        block_ids = sorted({ref.block_id for file_refs in refs.values() for ref in file_refs})
        known = await self._ask_places(block_ids, set(skip)) if block_ids else {}
        durable = set(block_ids) - set(self.vol.pending_among(block_ids))
        tiers = self.vol.tiers
        ram = {b for b in block_ids if tiers.holds("ram", b)}
        nvme = {b for b in block_ids if tiers.holds("nvme", b)}
        nodes = {name: place.held for name, place in known.items() if place.held is not None and name != FLASH}
        nodes[self.node] = nodes.get(self.node, set()) | ram | nvme
        flash = known.get(FLASH)
        return {
            "node": self.node, "durable_tier": tiers.durable_name,
            "unknown": {name: place.problem for name, place in known.items() if place.held is None},
            "files": [_file_report(ino, file_refs, ram, nvme, durable, nodes, flash)
                      for ino, file_refs in refs.items()],
        }

    async def _ask_places(self, block_ids: list[int], skip: set[str]) -> dict[str, _Known]:
        """Every other node's holdings, and the flash servers', asked at once by one deadline."""
        deadline = time.monotonic() + PEER_WAIT_S
        known: dict[str, _Known] = {}
        askers = self._askers(skip, known)
        limiter = trio.CapacityLimiter(PLACES_AT_ONCE)
        async with trio.open_nursery() as nursery:
            for name, ask in askers.items():
                nursery.start_soon(_ask, known, name, ask, block_ids, deadline, limiter)
        return known

    def _askers(self, skip: set[str], known: dict[str, _Known]) -> dict[str, Ask]:
        """How to ask each place; places that cannot be asked go straight into `known`."""
        askers: dict[str, Ask] = {}
        if self.vol.tiers.server_health("remote") is not None:
            askers[FLASH] = lambda ids, deadline: held_among(lambda b, _: self.vol.tiers.flash_holds(b), ids, deadline)
        for name, addresses in self._other_nodes().items():
            problem = self._why_not_asked(name, addresses, skip)
            if problem:
                known[name] = _Known(None, problem)
            else:
                askers[name] = self._peer_asker(addresses)
        return askers

    def _other_nodes(self) -> dict[str, list[str]]:
        """The block servers of the other live sessions, by node name ("" for one that serves none)."""
        if self.vol.cluster is None:
            return {}
        session = self.vol.cluster.session
        nodes: dict[str, list[str]] = defaultdict(list)
        for member in session.members:
            if member.sid != session.sid:
                nodes[member.host].append(member.peer)
        return nodes

    def _why_not_asked(self, name: str, addresses: list[str], skip: set[str]) -> str:
        if name in skip:
            return "did not answer an earlier request of this locate"
        if "" in addresses:
            return "serves no blocks to peers ([cluster] serve is not set there)"
        if self._secret is None:
            return "this node cannot ask its peers: it has no [cluster] secret_file"
        down = {server["server"] for server in self.vol.tiers.server_health("peers") or () if not server["up"]}
        if down & set(addresses):
            return "its block server is down (this node's reads pass it over)"
        return ""

    def _peer_asker(self, addresses: list[str]) -> Ask:
        """Ask every block server of one node (a host with several mounts has several)."""
        secret = self._secret
        assert secret is not None

        def ask(ids: Sequence[int], deadline: float) -> set[int]:
            return set().union(*(held_by_peer(address, secret, ids, deadline) for address in addresses))

        return ask


async def _ask(known: dict[str, _Known], name: str, ask: Ask, block_ids: list[int], deadline: float,
               limiter: trio.CapacityLimiter) -> None:
    try:
        known[name] = _Known(await trio.to_thread.run_sync(ask, block_ids, deadline, limiter=limiter))
    except NoAnswer as e:
        known[name] = _Known(None, str(e))


def _file_report(ino: int, refs: list[BlockRef], ram: set[int], nvme: set[int], durable: set[int],
                 nodes: dict[str, set[int]], flash: _Known | None) -> dict:
    def held(where: set[int]) -> int:
        return sum(ref.length for ref in refs if ref.block_id in where)

    report = {"ino": ino, "bytes": held({ref.block_id for ref in refs}), "ram": held(ram), "nvme": held(nvme),
              "durable": held(durable), "nodes": {name: held(blocks) for name, blocks in nodes.items()}}
    if flash is not None and flash.held is not None:
        report["flash"] = held(flash.held)
    return report
