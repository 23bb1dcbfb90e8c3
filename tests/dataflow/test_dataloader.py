"""A PyTorch DataLoader (4 workers, shuffled) over files only in S3 reads every sample as written,
through the data socket (aifs.client.Dataset) or through the mount, and the mount's counters show
that the prefetcher fetched each file before a worker read it: every S3 read was one the
prefetcher made, and no read reached a file the window had not."""

from __future__ import annotations

import pytest

from aifs.client import Dataset

from .conftest import FILES

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install aifs[torch])")
from torch.utils.data import DataLoader, RandomSampler  # noqa: E402
from torch.utils.data import Dataset as TorchDataset  # noqa: E402

from aifs.torch import PrefetchSampler  # noqa: E402

BATCH = 4
WORKERS = 4
AHEAD = 64  # more than the samples the loader has in flight: WORKERS * prefetch_factor (2) * BATCH


class ThroughTheMount(TorchDataset):
    """Sample i is the bytes of paths[i], read with open() as most datasets do."""

    def __init__(self, paths) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> bytes:
        with open(self.paths[index], "rb") as f:
            return f.read()


@pytest.mark.timeout_s(120)
@pytest.mark.filterwarnings("ignore:This DataLoader will create", "ignore:Failed to initialize NumPy")
@pytest.mark.parametrize("reads", [Dataset, ThroughTheMount], ids=["data-socket", "mount"])
def test_a_shuffled_epoch_reads_what_the_prefetcher_fetched_first(dataset, reads, watchdog):
    volume = dataset.volume
    volume.cold()
    shuffled = RandomSampler(range(FILES), generator=torch.Generator().manual_seed(3))
    sampler = PrefetchSampler(shuffled, dataset.paths, files_ahead=AHEAD)
    hits_before = volume.tier_hits()

    loader = DataLoader(reads(dataset.paths), sampler=sampler, batch_size=BATCH, num_workers=WORKERS)
    samples = [sample for batch in loader for sample in batch]

    assert sorted(map(dataset.index_of, samples)) == list(range(FILES))
    assert all(sample == dataset.source[dataset.index_of(sample)] for sample in samples)
    counts = volume.settled()
    hits_after = volume.tier_hits()
    hits = {tier: hits_after[tier] - before for tier, before in hits_before.items()}
    assert counts["files_missed"] == 0, counts
    assert counts["files_ready"] + counts["files_late"] == FILES, counts
    assert counts["files_ready"] > 0, counts
    assert counts["blocks_fetched"] == counts["blocks_used"] == FILES, counts
    assert counts["blocks_cancelled"] == counts["blocks_wasted"] == 0, counts
    assert hits["s3"] == FILES, f"each file came from S3 once, fetched by the prefetcher: {hits}"
    assert hits["ram"] + hits["nvme"] >= counts["files_ready"], f"ready files were read from this node: {hits}"
