"""A map-style dataset of files for torch's DataLoader, without importing torch: the DataLoader
needs only __len__ and __getitem__, and reads a whole batch with one __getitems__ when there is one."""

from collections.abc import Callable, Sequence
from typing import Any

from aifs.client.client import AnyPath, Client, default_client


class Dataset:
    def __init__(self, paths: Sequence[AnyPath], transform: Callable[[bytes], Any] | None = None,
                 client: Client | None = None) -> None:
        """Sample i is `transform(bytes of paths[i])` (the bytes themselves without a transform),
        read by `client` (by default the process's own, aifs.client.default_client)."""
        self.paths = list(paths)
        self.transform = transform
        self._client = client

    @property
    def client(self) -> Client:
        return self._client if self._client is not None else default_client()

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Any:
        return self._sample(self.client.read(self.paths[index]))

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """The batch's samples, read with one read_many (a few requests for the whole batch)."""
        return [self._sample(data) for data in self.client.read_many([self.paths[i] for i in indices])]

    def _sample(self, data: bytes) -> Any:
        return data if self.transform is None else self.transform(data)
