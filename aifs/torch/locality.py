"""LocalitySampler: DistributedSampler's drop-in that gives each rank, as far as it can, the
samples whose bytes its own node already holds.

    sampler = LocalitySampler(dataset, paths=sample_paths)     # paths: a list, or index -> path
    loader = DataLoader(dataset, batch_size=64, sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in loader: ...

Each epoch deals exactly the samples DistributedSampler would (the seeded permutation of the
whole dataset, padded or cut as it does) in equal shares, one per rank, but which rank gets
which sample follows the nodes' holdings (aifs.dataflow.local_shares). Every rank must
compute the same dealing, so every rank must see the same holdings and the same node of
each rank:

* With torch.distributed initialized (and one rank per process of its world), the ranks
  share them at construction and at each set_epoch, which every rank calls: each rank asks
  its own mount which node it is, and rank 0 locates every sample (aifs.dataflow.locate),
  for all. Those are collective calls; nothing else is exchanged, and dealing an epoch needs
  no communication.
* Otherwise pass `holders` (the nodes holding each sample, from
  aifs.dataflow.local_shares.holders_of, computed once and given to every rank) and
  `rank_nodes`. Ranks that located the samples each on their own could see different
  holdings (a peer that answered one node and not another, caches that changed between the
  two looks), and would then deal differently: some samples read twice in an epoch and
  others not at all. So the sampler never does that.

Holdings located at a set_epoch hold for that epoch: a rank's samples are local as long as
its node keeps them. Given `holders` are used for every epoch.
"""

import copy
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.distributed as dist
from torch.utils.data import Dataset
from torch.utils.data.distributed import DistributedSampler

from aifs.dataflow.local_shares import deal, holders_of
from aifs.dataflow.locate import AnyPath, locate, node_of

Paths = Sequence[AnyPath] | Callable[[int], AnyPath]


class LocalitySampler(DistributedSampler):
    def __init__(self, dataset: Dataset, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False, *, paths: Paths | None = None,
                 holders: Sequence[frozenset[str]] | None = None, rank_nodes: Sequence[str] | None = None) -> None:
        """As DistributedSampler, plus where the samples are: `paths` (sample i's file; by default
        the dataset's own `paths`, as aifs.client.Dataset has), or `holders` (the nodes holding
        sample i), and `rank_nodes` (rank r's node name)."""
        super().__init__(dataset, num_replicas, rank, shuffle, seed, drop_last)
        self._size = len(dataset)  # type: ignore[arg-type]
        self._paths = paths if paths is not None else getattr(dataset, "paths", None)
        if holders is None and self._paths is None:
            raise ValueError("LocalitySampler needs to know where the samples are: pass paths (a list, or a "
                             "function from index to path), or holders")
        if holders is not None and len(holders) != self._size:
            raise ValueError(f"holders has {len(holders)} entries for a dataset of {self._size} samples")
        self._fixed_holders = holders is not None
        self.rank_nodes = list(rank_nodes) if rank_nodes is not None else self._gather_rank_nodes()
        if len(self.rank_nodes) != self.num_replicas:
            raise ValueError(f"rank_nodes names {len(self.rank_nodes)} nodes for {self.num_replicas} ranks")
        self.holders = list(holders) if holders is not None else self._locate_holders()

    def set_epoch(self, epoch: int) -> None:
        """Every rank calls this before each epoch; without given holders, they are located anew."""
        super().set_epoch(epoch)
        if not self._fixed_holders:
            self.holders = self._locate_holders()

    def __iter__(self) -> Iterator[int]:
        return iter(deal(self._epoch_samples(), self.rank_nodes, self.holders)[self.rank])

    def _epoch_samples(self) -> list[int]:
        """The samples DistributedSampler deals this epoch, all ranks' together, in its order:
        its own iteration as the only rank of a world as large as the whole epoch."""
        whole = copy.copy(self)
        whole.rank, whole.num_replicas, whole.num_samples = 0, 1, self.total_size
        return list(DistributedSampler.__iter__(whole))

    def _path(self, index: int) -> AnyPath:
        assert self._paths is not None
        return self._paths(index) if callable(self._paths) else self._paths[index]

    def _shared(self) -> bool:
        """Whether the ranks can share what they learn: one process per rank of an initialized world."""
        return dist.is_available() and dist.is_initialized() and dist.get_world_size() == self.num_replicas > 1

    def _gather_rank_nodes(self) -> list[str]:
        if self._size == 0:
            return [""] * self.num_replicas  # nothing to deal: no node needs a name
        if self.num_replicas == 1:
            return [self._own_node()]
        if not self._shared():
            raise ValueError("LocalitySampler needs the node of every rank: pass rank_nodes, or initialize "
                             "torch.distributed (one process per rank) so that the ranks tell each other")
        return _all_gather_text(self._own_node())

    def _own_node(self) -> str:
        """This rank's node, as the mount holding the samples calls it (a pod's own host name may differ)."""
        return node_of(self._path(0))

    def _locate_holders(self) -> list[frozenset[str]]:
        if not self._shared():
            if self.num_replicas > 1:
                raise ValueError("ranks that locate the samples each on their own may deal them differently; "
                                 "pass holders (aifs.dataflow.local_shares.holders_of), or initialize "
                                 "torch.distributed so that rank 0 locates them for all")
            return self._located()
        return _from_rank_0(self._located() if dist.get_rank() == 0 else None, self._size)

    def _located(self) -> list[frozenset[str]]:
        return holders_of(locate(self._path(i) for i in range(self._size)))


# What the ranks tell each other, in tensors: torch's object collectives need numpy, these do not.

MASK_BITS = 62  # node bits per int64 of a sample's mask (the sign bit stays clear)


def _device() -> torch.device:
    """Where this world's collectives take their tensors: NCCL's on this rank's GPU."""
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def _all_gather_text(text: str) -> list[str]:
    """Every rank's `text`, by rank."""
    device = _device()
    data = torch.tensor(list(text.encode()), dtype=torch.uint8, device=device)
    length = torch.tensor([len(data)], device=device)
    lengths = [torch.zeros_like(length) for _ in range(dist.get_world_size())]
    dist.all_gather(lengths, length)
    padded = torch.zeros(max(int(n) for n in lengths), dtype=torch.uint8, device=device)
    padded[:len(data)] = data
    gathered = [torch.zeros_like(padded) for _ in lengths]
    dist.all_gather(gathered, padded)
    return [bytes(part[:int(n)].tolist()).decode() for part, n in zip(gathered, lengths)]


def _from_rank_0(holders: list[frozenset[str]] | None, size: int) -> list[frozenset[str]]:
    """Rank 0's holders (the others pass None), on every rank: the node names, then for each
    sample a mask of those that hold it."""
    text = "\n".join(sorted(frozenset().union(*holders))) if holders is not None else ""
    names = [name for name in _all_gather_text(text)[0].split("\n") if name]
    words = max(1, -(-len(names) // MASK_BITS))
    rows = [[0] * words for _ in range(size)]
    if holders is not None:
        bit = {name: i for i, name in enumerate(names)}
        for row, held in zip(rows, holders):
            for i in map(bit.__getitem__, held):
                row[i // MASK_BITS] |= 1 << i % MASK_BITS
    masks = torch.tensor(rows, dtype=torch.int64, device=_device()).reshape(size, words)
    dist.broadcast(masks, src=0)
    return [_named(row, names) for row in masks.tolist()]


def _named(row: list[int], names: list[str]) -> frozenset[str]:
    """The names whose bits are set in a sample's mask."""
    found = []
    for word, value in enumerate(row):
        while value:
            low = value & -value
            found.append(names[word * MASK_BITS + low.bit_length() - 1])
            value ^= low
    return frozenset(found)
