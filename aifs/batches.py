"""Lists of files split into requests to a mount: few calls for many small files, yet
calls that end (and progress that moves) for large ones."""

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def batches(items: Iterable[T], size: Callable[[T], int], max_items: int, max_bytes: int) -> Iterator[list[T]]:
    """Runs of `items`, in order, of at most `max_items` and `max_bytes` (a larger item alone)."""
    batch: list[T] = []
    nbytes = 0
    for item in items:
        if batch and (len(batch) >= max_items or nbytes + size(item) > max_bytes):
            yield batch
            batch, nbytes = [], 0
        batch.append(item)
        nbytes += size(item)
    if batch:
        yield batch
