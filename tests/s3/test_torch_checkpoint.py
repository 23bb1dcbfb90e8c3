"""A real client: PyTorch (CPU) saves a training checkpoint to the mount with `torch.save` and
with `torch.distributed.checkpoint` (one process, FileSystemWriter), and loads it back equal,
also after the NVMe tier is wiped so that every byte comes back from the bucket."""

import warnings

import pytest

from .helpers_mount import make_s3_volume, sync_wait

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed; `pip install -e .[test]` brings torch==2.13.0 (CPU)")
dcp = pytest.importorskip("torch.distributed.checkpoint")

__all__ = ["make_s3_volume"]  # the fixture, imported so pytest finds it


def training_state() -> dict:
    """A model after one Adam step (about 12 MiB: weights and two moments) and a few extras."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(8, 512)).sum().backward()
    optimizer.step()
    return {"model": model.state_dict(), "optim": optimizer.state_dict(), "step": 7,
            "rng": torch.get_rng_state(), "bf16": torch.randn(333, dtype=torch.bfloat16)}


def zeros_like(state):
    """The same structure with every tensor zeroed: what dcp.load fills in place."""
    if isinstance(state, torch.Tensor):
        return torch.zeros_like(state)
    if isinstance(state, dict):
        return {key: zeros_like(value) for key, value in state.items()}
    if isinstance(state, list):
        return [zeros_like(value) for value in state]
    return state


def assert_same_state(want, got, path: str = "") -> None:
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == want.dtype, path
        assert torch.equal(got, want), f"tensor {path} differs"
    elif isinstance(want, dict):
        assert got.keys() == want.keys(), path
        for key in want:
            assert_same_state(want[key], got[key], f"{path}/{key}")
    elif isinstance(want, list):
        assert len(got) == len(want), path
        for i, (w, g) in enumerate(zip(want, got)):
            assert_same_state(w, g, f"{path}[{i}]")
    else:
        assert got == want, path


@pytest.fixture
def volume(make_s3_volume, moto_server, bucket):
    volume = make_s3_volume(moto_server.endpoint, bucket)
    volume.mount()
    return volume


@pytest.mark.timeout_s(120)
def test_torch_save_and_load(volume):
    state = training_state()
    path = volume.path / "ckpt" / "step7.pt"
    path.parent.mkdir()
    torch.save(state, path)
    assert_same_state(state, torch.load(path))

    sync_wait(volume.path)
    volume.reload_from_s3()
    assert_same_state(state, torch.load(path))


@pytest.mark.timeout_s(120)
def test_distributed_checkpoint_single_process(volume):
    state = training_state()
    folder = volume.path / "dcp" / "step7"
    with warnings.catch_warnings():  # "assuming the intent is to save in a single process"
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(state, storage_writer=dcp.FileSystemWriter(str(folder)))
        loaded = zeros_like(state)
        dcp.load(loaded, storage_reader=dcp.FileSystemReader(str(folder)))
        assert_same_state(state, loaded)

        sync_wait(volume.path)
        volume.reload_from_s3()
        loaded = zeros_like(state)
        dcp.load(loaded, storage_reader=dcp.FileSystemReader(str(folder)))
    assert_same_state(state, loaded)
