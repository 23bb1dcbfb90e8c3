"""A real client: a PyTorch DataLoader (4 workers) over small files on the mount, cold then warm,
yields the same bytes as the same files in a local directory."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")
from torch.utils.data import DataLoader, Dataset  # noqa: E402

FILES = 1000
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


@pytest.mark.timeout_s(300)
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_dataloader_cold_then_warm_matches_local_files(tiered, local_dir):
    volume = tiered(ram="64MiB")
    rng = random.Random(5)
    names = [f"part{i % 10}/sample{i:05d}.bin" for i in range(FILES)]
    for sub in {n.split("/")[0] for n in names}:
        (volume.path / sub).mkdir()
        (local_dir / sub).mkdir()
    for name in names:
        data = rng.randbytes(rng.randrange(16 * KiB, 128 * KiB + 1))
        (volume.path / name).write_bytes(data)
        (local_dir / name).write_bytes(data)
    volume.make_cold()  # data only in the bottom tier

    expected = epoch(local_dir, names)
    before = volume.hits()
    assert epoch(volume.path, names) == expected
    after_cold = volume.hits()
    assert after_cold["objstore"] - before["objstore"] >= FILES  # the cold epoch really was cold
    assert epoch(volume.path, names) == expected
    assert volume.hits()["objstore"] == after_cold["objstore"]  # the warm epoch never went down
