"""A real client: a PyTorch DataLoader (4 workers) over a map-style dataset of 2,000 small files
on the mount, cold (the data only in S3) then warm, yields the same bytes as the same files in a
local directory, and the tier counters say where each epoch read from."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from .helpers_mount import make_s3_volume, status, sync_wait

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")
from torch.utils.data import DataLoader, Dataset  # noqa: E402

__all__ = ["make_s3_volume"]  # the fixture, imported so pytest finds it
FILES = 2000
KiB = 1 << 10


class FileDataset(Dataset):
    """Map-style: sample i is the bytes of file i, as a training input pipeline reads them."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[int, bytes]:
        with open(self.paths[index], "rb") as f:
            return index, f.read()


def epoch(root: Path, names: list[str]) -> dict[int, bytes]:
    loader = DataLoader(FileDataset([root / n for n in names]), batch_size=None, shuffle=True,
                        num_workers=4, generator=torch.Generator().manual_seed(7))
    samples = dict(loader)
    assert len(samples) == len(names)
    return samples


def hits(volume, tier: str) -> int:
    return status(volume.path)["tiers"][tier]["hits"]


@pytest.mark.timeout_s(400)
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_dataloader_cold_from_s3_then_warm_matches_local_files(make_s3_volume, moto_server, bucket, local_dir):
    volume = make_s3_volume(moto_server.endpoint, bucket)
    volume.mount()
    rng = random.Random(5)
    names = [f"part{i % 10}/sample{i:05d}.bin" for i in range(FILES)]
    for sub in {n.split("/")[0] for n in names}:
        (volume.path / sub).mkdir()
        (local_dir / sub).mkdir()
    for name in names:
        data = rng.randbytes(rng.randrange(16 * KiB, 128 * KiB + 1))
        (volume.path / name).write_bytes(data)
        (local_dir / name).write_bytes(data)
    sync_wait(volume.path, timeout=300)
    volume.reload_from_s3()  # NVMe wiped, RAM empty: the data is only in the bucket

    expected = epoch(local_dir, names)
    assert epoch(volume.path, names) == expected
    cold = hits(volume, "s3")
    # Every sample came from S3: read from there, or from NVMe once a shuffle coming back to its
    # pack had the pack fetched whole and copied there (docs/packing.md).
    assert cold > 0 and cold + hits(volume, "nvme") >= FILES, "the cold epoch read every sample from S3"
    assert epoch(volume.path, names) == expected
    assert hits(volume, "s3") == cold, "the warm epoch never went down to S3"
