"""The protocol every tier implements; a tier knows block ids and bytes, never files."""

from collections.abc import Callable, Iterable
from typing import Any, Protocol

PromotionSink = Callable[[list[tuple[int, bytes, int]]], None]


class OneObjectPerBlock:
    """What a cold tier storing each block as an object of its own says of held and promoted
    blocks: it holds none in memory, and fetches nothing beyond what is asked."""

    def get_held(self, block_id: int, offset: int, length: int | None) -> None:
        return None

    def on_promoted(self, sink: PromotionSink) -> None:
        pass


class Tier(Protocol):
    name: str
    capacity: int

    def get(self, block_id: int) -> bytes | None:
        """The whole object, or None when this tier does not hold it."""

    def get_range(self, block_id: int, offset: int, length: int) -> bytes | None:
        """`length` bytes from `offset` (fewer at the object's end), or None when it is absent.
        The RAM tier, which always answers from a whole copy, need not have it."""

    def put(self, block_id: int, data: bytes) -> None: ...

    def delete(self, block_id: int) -> None: ...

    def contains(self, block_id: int) -> bool: ...

    def used(self) -> int: ...


class ColdTier(Tier, Protocol):
    """The durable bottom tier: puts become durable at the latest when flush() returns.
    `marker_missing`: opened to check only, it found no volume marker (see s3_marker).
    `used_is_exact`: used() is what the tier holds, not only what this process put."""

    marker_missing: bool
    used_is_exact: bool

    def flush(self) -> None: ...

    def get(self, block_id: int, demand: bool = False) -> bytes | None:
        """The whole object, or None. `demand`: a reader waits for it now (not a read ahead),
        so the tier may learn how readers go through what it holds."""

    def get_range(self, block_id: int, offset: int, length: int, demand: bool = False) -> bytes | None:
        """As Tier.get_range; `demand` as for get."""

    def on_promoted(self, sink: PromotionSink) -> None:
        """Have `sink` called, from any thread, with blocks the tier fetched beyond what was
        asked (block id, bytes, checksum): the members of a pack that readers keep coming
        back to, for the tiers above to keep. Their checksums are yet to be verified."""

    def get_held(self, block_id: int, offset: int, length: int | None) -> bytes | None:
        """Bytes of an object (to its end with `length` None) that the tier holds in memory
        now, returned without a request or a wait, so the event loop may ask; None: ask
        get or get_range."""

    def delete_many(self, block_ids: list[int]) -> None:
        """Delete objects in bulk (S3: one request per 1,000); OSError unless all are gone."""

    def block_ids(self) -> list[int]: ...

    def block_sizes(self) -> dict[int, int]:
        """Every object held, with its size (fsck and gc)."""

    def url(self, block_id: int | None = None) -> str:
        """Where an operator finds the tier, or one of its objects."""

    def close(self) -> None:
        """Release what the tier started (processes, threads); it is not used afterwards."""


class RemoteTier(Tier, Protocol):
    """A cache between NVMe and the cold tier shared by many nodes; every call may wait on the network."""

    def put(self, block_id: int, data: bytes, pin: bool | None = None) -> None: ...

    def unpin(self, block_id: int) -> None: ...

    def close(self) -> None: ...

    def status(self) -> list[dict[str, Any]]:
        """One entry per server, as its circuit breaker sees it; never waits on the network."""

    @property
    def ranges_on_loop(self) -> bool:
        """Whether ranged reads may use `get_range_on_loop` rather than a thread."""

    async def open_on_loop(self) -> None:
        """Connect what `get_range_on_loop` uses, ahead of the first reads."""

    async def get_range_on_loop(self, block_id: int, offset: int, length: int) -> bytes | None:
        """`get_range` on the calling trio loop."""

    def close_on_loop(self) -> None:
        """Release what the loop's reads hold; called on the loop, before `close`."""


class PeerTier(RemoteTier, Protocol):
    """The other mounts of a shared volume as one cache; its members change while it runs."""

    def set_servers(self, servers: Iterable[str], local: str = "") -> None:
        """Follow the membership: `servers` are the live mounts' block servers, `local` this one."""


def object_name(block_id: int) -> str:
    """Object names spread over 256 fan-out folders by the low byte of the id."""
    return f"{block_id & 0xFF:02x}/{block_id:016x}"
