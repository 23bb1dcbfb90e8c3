"""This mount's block server for its peers, and who its peers are.

The server speaks the flash servers' block protocol with the volume's secret, from the
mount's own event loop: over TCP, and where an RDMA device is found (`[cluster] transport`,
chosen as the flash servers choose) with a verbs endpoint beside it, whose registered
arena is smaller than a flash server's (a mount's memory is mostly its RAM tier's). Its
socket is bound before the volume is mounted, so an address in use is one clear line at
start rather than a mount that serves nobody. Peers find it through the session record,
which carries the advertised address. It runs the push transforms `[cluster] transforms`
enables over the blocks it holds (aifs.push), and no others.
"""

import socket
from collections import Counter
from collections.abc import Iterable

import trio

from aifs.cluster.peer_store import PeerStore
from aifs.config.models import ClusterConfig
from aifs.flash.server import BlockServer
from aifs.meta.sessions import SessionInfo
from aifs.push.serving import PEER_NODE, served_transforms
from aifs.rdma.auth import Secret
from aifs.rdma.select import choose
from aifs.rdma.transport import Address
from aifs.rdma.verbs_server import SLOT_BYTES, VerbsEndpoint
from aifs.tiers.manager import TierManager

BACKLOG = 128
ARENA_BYTES = 256 << 20


class PeerServeUnavailable(Exception):
    """The address in `cluster.serve` cannot be listened on; the message says why."""


class PeerServer:
    def __init__(self, cluster: ClusterConfig) -> None:
        assert cluster.serve is not None and cluster.secret_file is not None
        self._secret = Secret.from_file(cluster.secret_file)
        self._device = choose(cluster.transport, cluster.rdma_device).device
        self._socket = _listen(Address.parse(cluster.serve))
        port = self._socket.getsockname()[1]
        self.address = str(Address(cluster.advertised_host.strip("[]"), port))
        self._transforms = served_transforms(cluster.transforms, cluster.mask_patterns, PEER_NODE)
        self._server: BlockServer | None = None

    @property
    def served(self) -> Counter[str]:
        """Block bytes sent to peers, by their host."""
        return self._server.served if self._server is not None else Counter()

    async def run(self, tiers: TierManager) -> None:
        """Serve the tiers' blocks until cancelled."""
        verbs = VerbsEndpoint(self._device, ARENA_BYTES, SLOT_BYTES) if self._device is not None else None
        try:
            self._server = BlockServer(PeerStore(tiers), self._secret, verbs, offload=tiers.for_peers,
                                       transforms=self._transforms)
            await self._server.serve_on(trio.socket.from_stdlib_socket(self._socket))
        finally:
            if verbs is not None:
                verbs.close()


def _listen(address: Address) -> socket.socket:
    try:
        family = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((address.host, address.port), family=family, backlog=BACKLOG)
    except OSError as e:
        raise PeerServeUnavailable(f"cannot serve peers on {address} (cluster.serve): {e.strerror or e}; "
                                   "free the port or choose another") from None


def peer_addresses(members: Iterable[SessionInfo]) -> list[str]:
    """The block servers of the live sessions, this mount's own included."""
    return sorted({info.peer for info in members if info.peer})
