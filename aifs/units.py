"""Byte counts as people read them: binary units, named as such (KiB, MiB, GiB), as the config writes them."""

from pydantic import ByteSize


def size(nbytes: float) -> str:
    """`1.5 MiB`; a fractional count (a rate) is cut to whole bytes."""
    return ByteSize(max(int(nbytes), 0)).human_readable(separator=" ")


def rate(nbytes_per_s: float) -> str:
    return f"{size(nbytes_per_s)}/s"
