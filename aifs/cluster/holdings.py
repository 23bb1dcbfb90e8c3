"""Which of some blocks a place holds, asked of the place itself within a deadline.

A place is anything that answers "do you hold block B?": another mount's block server (the
block protocol's HAS, answered from that mount's RAM and NVMe indexes without reading a
byte) or the flash servers. A few threads ask at once, so the requests to one server
pipeline over its connection. A place that has not answered for every block by the
deadline, or fails, has holdings nobody knows: that is reported as such, never as a place
that holds nothing.
"""

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from aifs.rdma.auth import Secret
from aifs.rdma.tcp import TcpConnection
from aifs.rdma.transport import Address

ASKERS = 16  # requests in flight to one place


class NoAnswer(Exception):
    """The place did not say, for every block, whether it holds it; the message says why."""


Holds = Callable[[int, float], bool]  # (block id, seconds it may take) -> held


def held_among(holds: Holds, block_ids: Sequence[int], deadline: float) -> set[int]:
    """The blocks `holds` says are held, each asked once, all of them by `deadline` (on
    time.monotonic's clock); raises NoAnswer otherwise."""
    askers = max(1, min(ASKERS, len(block_ids)))
    with ThreadPoolExecutor(askers, thread_name_prefix="aifs-holdings") as pool:
        shares = pool.map(lambda i: _ask_share(holds, block_ids[i::askers], deadline), range(askers))
        return set().union(*shares)


def _ask_share(holds: Holds, block_ids: Sequence[int], deadline: float) -> set[int]:
    found = set()
    for block_id in block_ids:
        left = deadline - time.monotonic()
        if left <= 0:
            raise NoAnswer("did not answer in time")
        try:
            if holds(block_id, left):
                found.add(block_id)
        except Exception as e:  # noqa: BLE001 - whatever failed, the answer is missing
            raise NoAnswer(str(e) or type(e).__name__) from None
    return found


def held_by_peer(address: str, secret: Secret, block_ids: Sequence[int], deadline: float) -> set[int]:
    """The blocks the mount serving at `address` holds in its RAM or NVMe; raises NoAnswer.
    A connection of its own, closed afterwards: a query now and then needs no pool."""
    connection = TcpConnection(Address.parse(address), streams=2, timeout=max(0.001, deadline - time.monotonic()),
                               secret=secret)
    try:
        return held_among(lambda block_id, left: connection.contains(block_id, timeout=left), block_ids, deadline)
    finally:
        connection.close()
