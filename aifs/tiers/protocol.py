"""The protocol every tier implements; a tier knows block ids and bytes, never files."""

from typing import Protocol


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
    `marker_missing`: opened to check only, it found no volume marker (see s3_marker)."""

    marker_missing: bool

    def flush(self) -> None: ...

    def delete_many(self, block_ids: list[int]) -> None:
        """Delete objects in bulk (S3: one request per 1,000); OSError unless all are gone."""

    def block_ids(self) -> list[int]: ...

    def block_sizes(self) -> dict[int, int]:
        """Every object held, with its size (fsck and gc)."""

    def url(self, block_id: int | None = None) -> str:
        """Where an operator finds the tier, or one of its objects."""

    def close(self) -> None:
        """Release what the tier started (processes, threads); it is not used afterwards."""


def object_name(block_id: int) -> str:
    """Object names spread over 256 fan-out folders by the low byte of the id."""
    return f"{block_id & 0xFF:02x}/{block_id:016x}"
