"""What one block server will hold for its clients: blocks, request memory, connections, time.

Every limit is there so that no client, however it behaves, can take the server
down: a put is refused above the largest block, its payload (and a read's
answer) waits for room under the memory ceiling shared by all connections,
connections beyond the cap are turned away, and one that sends nothing for the
idle timeout is closed.
"""

import math
from dataclasses import dataclass

MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_block: int = 64 * MiB               # the largest volume block size
    max_request_memory: int = 256 * MiB     # blocks being received or sent, all connections together
    max_connections: int = 1024
    idle_timeout: float = 300.0             # seconds without a request (or progress on one)
    handshake_timeout: float = 10.0         # seconds a new connection has to authenticate

    def __post_init__(self) -> None:
        if self.max_block <= 0 or self.max_request_memory <= 0 or self.max_connections <= 0:
            raise ValueError("block size, request memory and connection limits must be positive")
        if not (0 < self.idle_timeout < math.inf and 0 < self.handshake_timeout < math.inf):
            raise ValueError("timeouts must be positive numbers of seconds")
