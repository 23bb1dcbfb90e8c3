"""Reading files of aifs mounts without a FUSE round trip per file (for DataLoader workers).

    import aifs.client
    data = aifs.client.read("/mnt/aifs/train/00001.jpg")
    batch = aifs.client.read_many(paths)            # order kept; raises the first OSError
    batch = aifs.client.read_many(paths, errors="return")   # an OSError in place of each failure
    dataset = aifs.client.Dataset(paths, transform=decode)  # for torch.utils.data.DataLoader

The bytes are always those a read through the mount returns (docs/bypass.md).
"""

from collections.abc import Iterable
from typing import Literal

from aifs.client.client import AnyPath, Client, ReadCounts, Result, default_client
from aifs.client.dataset import Dataset

__all__ = ["Client", "Dataset", "ReadCounts", "default_client", "read", "read_many"]


def read(path: AnyPath) -> bytes:
    """The bytes of one file, by the process's own client."""
    return default_client().read(path)


def read_many(paths: Iterable[AnyPath], errors: Literal["raise", "return"] = "raise") -> list[Result]:
    """The bytes of each file in order, by the process's own client (see Client.read_many)."""
    return default_client().read_many(paths, errors)
