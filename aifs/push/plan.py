"""The mount's side of a push job (the `push_plan` control operation): where each file's
blocks are, so that the client sends each piece of work to a block server that holds it.

A block this node holds itself (RAM or NVMe) is the client's to transform: reading it costs
no network. Any other block goes first to the flash servers that should hold whole copies
of it, in ring order, then to the other nodes of a shared volume whose block servers say
they hold it (each asked once per plan, all by one deadline: a node that does not answer in
time is left out, and the plan's notes say so).
"""

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import trio

from aifs.cluster.holdings import NoAnswer, held_by_peer
from aifs.cluster.peers import peer_addresses
from aifs.config.models import RemoteTier
from aifs.rdma.auth import Secret
from aifs.vfs.locate import PEER_WAIT_S
from aifs.vfs.volume import Volume

FLASH_SERVER = "flash server"
PEER_NODE = "peer node"

Places = Callable[[int], list[list[Any]]]  # block id -> [[server, the block's id there], ...]
Servers = dict[str, dict[str, str]]  # server -> {"kind": ..., "secret_file": ...}


async def push_plan(volume: Volume, files: list[int]) -> dict[str, Any]:
    """`files` are regular files' inodes. A piece is [block index, offset and length in the block,
    [[server, the block's id there], ...] in the order to ask them]; `servers` says what each
    server is and which secret file reaches it. A file's bytes that no piece covers (holes), and
    pieces that name no server, are read through the mount."""
    refs = {ino: sorted(volume.meta.all_block_refs(ino).items()) for ino in files}
    block_ids = sorted({ref.block_id for file_refs in refs.values() for _, ref in file_refs})
    away = {b for b in block_ids if not (volume.tiers.holds("ram", b) or volume.tiers.holds("nvme", b))}
    flash, servers = _flash_places(volume)
    peers, peer_servers, notes = await _peer_places(volume, sorted(away))

    def places(block_id: int) -> list[list[Any]]:
        return flash(block_id) + peers(block_id) if block_id in away else []

    return {
        "block_size": volume.config.volume.block_size,
        "servers": {**servers, **peer_servers},
        "notes": notes,
        "files": [{"ino": ino, "size": volume.meta.getattr(ino).size, "pieces": [
            [index, ref.offset, ref.length, places(ref.block_id)] for index, ref in file_refs
        ]} for ino, file_refs in refs.items()],
    }


def _nowhere(block_id: int) -> list[list[Any]]:
    return []


def _flash_places(volume: Volume) -> tuple[Places, Servers]:
    """The flash servers that should hold whole copies of a block (none for erasure-coded
    blocks: each server holds a shard), and how they are reached."""
    remote = volume.tiers.remote
    config = next((tier for tier in volume.config.tiers if isinstance(tier, RemoteTier)), None)
    if remote is None or config is None:
        return _nowhere, {}
    reached = {"kind": FLASH_SERVER, "secret_file": str(config.secret_file)}
    servers = {health["server"]: reached for health in volume.tiers.server_health("remote") or ()}

    def places(block_id: int) -> list[list[Any]]:
        key, names = remote.whole_copies(block_id)
        return [[name, key] for name in names]

    return places, servers


async def _peer_places(volume: Volume, block_ids: Sequence[int]) -> tuple[Places, Servers, list[str]]:
    """The other nodes whose block servers hold a block (several take turns by block), how
    they are reached, and a note for each node that did not say what it holds."""
    cluster, secret_file = volume.cluster, volume.config.cluster.secret_file
    if cluster is None or secret_file is None or not block_ids:
        return _nowhere, {}, []
    own = cluster.session.info.peer
    secret = Secret.from_file(secret_file)
    deadline = time.monotonic() + PEER_WAIT_S
    held: dict[str, set[int]] = {}
    notes: list[str] = []

    async def ask(address: str) -> None:
        try:
            held[address] = await trio.to_thread.run_sync(held_by_peer, address, secret, block_ids, deadline)
        except NoAnswer as e:
            notes.append(f"{PEER_NODE} {address} did not say which blocks it holds ({e}): no piece goes to it")

    async with trio.open_nursery() as nursery:
        for address in peer_addresses(cluster.session.members):
            if address != own:
                nursery.start_soon(ask, address)
    holders: dict[int, list[str]] = defaultdict(list)
    for address in sorted(held):
        for block_id in held[address]:
            holders[block_id].append(address)

    def places(block_id: int) -> list[list[Any]]:
        found = holders.get(block_id, [])
        turn = block_id % len(found) if found else 0
        return [[address, block_id] for address in found[turn:] + found[:turn]]

    reached = {"kind": PEER_NODE, "secret_file": str(secret_file)}
    return places, {address: reached for address in held}, notes
