"""A sampler that tells aifs each epoch's order before the DataLoader reads it.

It wraps any sampler (RandomSampler, DistributedSampler, a batch sampler) and yields exactly
what that sampler yields; at the start of each epoch it hints the files in that order
(aifs.dataflow.OrderHint), from the main process: the DataLoader's workers share the node's
mount, which then fetches ahead of all of them. A hint that cannot be sent is a warning, never
a failed epoch: the files are read the same without it.
"""

import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from torch.utils.data import Sampler

from aifs.client.client import AnyPath
from aifs.control.client import ControlError
from aifs.dataflow.hints import OrderHint


class PrefetchSampler(Sampler):
    def __init__(self, sampler: Iterable[Any], paths: Sequence[AnyPath], reader: str | None = None,
                 files_ahead: int | None = None, bytes_ahead: int | None = None) -> None:
        """`paths[i]` is the file sample i is read from; `reader`, `files_ahead`, `bytes_ahead`
        as for OrderHint (by default a reader of its own, and the mount's budgets)."""
        self.sampler = sampler
        self.hint = OrderHint(paths, reader, files_ahead, bytes_ahead)

    def __iter__(self) -> Iterator[Any]:
        drawn = list(self.sampler)
        self._send(drawn)
        return iter(drawn)

    def __len__(self) -> int:
        return len(self.sampler)  # type: ignore[arg-type]

    def set_epoch(self, epoch: int) -> None:
        """DistributedSampler's: the next epoch's order (other samplers have none to set)."""
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def _send(self, drawn: list[Any]) -> None:
        try:
            self.hint.send(index for item in drawn for index in _indices(item))
        except (OSError, ControlError) as e:
            warnings.warn(f"aifs: this epoch is read without prefetch: {e}", RuntimeWarning, stacklevel=3)


def _indices(item: Any) -> Iterable[int]:
    """The sample indices of what a sampler yields: one index, or a batch sampler's list of them."""
    return item if isinstance(item, (list, tuple)) else (item,)
