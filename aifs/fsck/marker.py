"""The durable tier's volume marker: without it a mount refuses a volume that holds data
(aifs.tiers.s3_marker), so fsck says so; fsck itself never writes a marker."""

from collections.abc import Iterator

from aifs.fsck.context import Context
from aifs.fsck.report import Finding


def check_marker(ctx: Context) -> Iterator[Finding]:
    if ctx.cold.marker_missing:
        yield Finding(
            "missing-marker", ctx.cold.url(),
            "the bucket prefix holds no aifs volume marker: it was emptied, or it is not this volume's; "
            "blocks missing from it are reported below, and a mount refuses it until given "
            "--accept-missing-marker",
        )
