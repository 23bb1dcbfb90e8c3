"""The volume marker: a small object that ties a bucket prefix to one aifs volume.

Block ids are only unique within a volume, so two volumes writing under one
prefix would overwrite each other's blocks. The marker holds the identity that
the metadata also holds (`MetaEngine.volume`: uuid, block size, format), and a
mount whose metadata names another volume is refused before any block is written.
"""

import json
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

MARKER_NAME = "aifs-volume.json"


class S3SetupError(Exception):
    """The bucket cannot be used by this volume; the message says what to do."""


class MarkerMode(Enum):
    """What opening the tier may do about the marker."""

    CLAIM = "claim"    # write it when absent: a new volume, or one the user says to re-mark
    EXPECT = "expect"  # the metadata refers to file data, so a missing marker means an emptied or wrong bucket
    CHECK = "check"    # fsck and gc: read it, never write it


@dataclass(frozen=True)
class VolumeMarker:
    uuid: str
    block_size: int
    format: int

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "VolumeMarker":
        """From `MetaEngine.volume` or a parsed marker: both use the same keys."""
        return cls(str(data["uuid"]), int(data["block_size"]), int(data["format"]))

    @classmethod
    def parse(cls, raw: bytes, where: str) -> "VolumeMarker":
        try:
            return cls.from_dict(json.loads(raw))
        except (ValueError, KeyError, TypeError) as exc:
            raise S3SetupError(
                f"{where} is not a valid aifs volume marker ({exc!r}); "
                "it was not written by aifs, so use another prefix"
            ) from None

    def dump(self) -> bytes:
        return json.dumps(asdict(self), indent=1).encode() + b"\n"

    def check_owner(self, ours: "VolumeMarker", where: str) -> None:
        """Refuse a prefix that another volume (another uuid) already holds."""
        if self.uuid != ours.uuid:
            raise S3SetupError(
                f"{where} belongs to another aifs volume: its marker says uuid {self.uuid}, "
                f"this volume's metadata says uuid {ours.uuid}; use another bucket or prefix, "
                "or mount with the metadata of that volume"
            )
