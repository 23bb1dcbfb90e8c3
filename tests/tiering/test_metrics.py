"""Prometheus metrics: the config keeps them on loopback, the endpoint serves tier, upload and FUSE figures."""

from __future__ import annotations

import os

import pytest
import trio
from helpers import metrics_config, metrics_text

from aifs.config import ConfigError, load_config
from aifs.metrics import instrument_operations, serve_metrics
from aifs.metrics.registry import REGISTRY
from aifs.vfs.volume import Volume

def config(tmp_path, listen: str, extra: str = ""):
    return load_config(metrics_config(tmp_path, listen, extra))


def scrape(port: int) -> dict[str, float]:
    samples = {}
    for line in metrics_text(port).splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


@pytest.mark.parametrize("listen", ["0.0.0.0:9464", "10.1.2.3:9464", "[::]:9464"])
def test_only_loopback_unless_allowed(tmp_path, listen):
    with pytest.raises(ConfigError, match="metrics.listen = .*not a loopback address"):
        config(tmp_path, listen)
    assert config(tmp_path, listen, "allow_remote = true\n").metrics.allow_remote


def test_metrics_are_off_by_default(tmp_path):
    (tmp_path / "a.toml").write_text(f'[volume]\nstate_dir = "{tmp_path}"\n')
    assert serve_metrics(load_config(tmp_path / "a.toml").metrics) is None


def test_endpoint_serves_tier_upload_and_fuse_metrics(tmp_path):
    volume = Volume(config(tmp_path, "127.0.0.1:0"))
    server = serve_metrics(volume.config.metrics)
    server.watch(volume)
    data = os.urandom(3 * 65536 + 7)

    @instrument_operations
    class Ops:
        async def read(self, off: int, size: int) -> bytes:
            return await volume.read(of, off, size)

        async def fail(self) -> None:
            raise OSError(5, "EIO")

    async def work() -> None:
        await volume.write(of, 0, data)
        await volume.flush_handle(of)
        for _ in range(2):
            assert await Ops().read(0, len(data)) == data
        with pytest.raises(OSError):
            await Ops().fail()

    try:
        ino, _ = volume.meta.create(1, b"f", 0o100644, 0, 0)
        of = volume.open(ino, for_reading=True)
        trio.run(work)
        samples = scrape(server.port)
    finally:
        server.close()
        trio.run(volume.close)
    assert samples['aifs_tier_hits_total{tier="ram"}'] >= 4
    assert samples['aifs_tier_read_bytes_total{tier="ram"}'] >= 2 * len(data)
    assert samples['aifs_tier_misses_total{tier="ram"}'] == samples['aifs_tier_hits_total{tier="nvme"}'] \
        + samples['aifs_tier_hits_total{tier="objstore"}']
    assert samples['aifs_upload_backlog_blocks'] == 4
    assert samples['aifs_upload_backlog_bytes'] == len(data)
    assert samples['aifs_fuse_ops_total{op="read"}'] >= 2
    assert samples['aifs_fuse_op_seconds_count{op="read"}'] >= 2
    assert samples['aifs_fuse_errors_total{op="fail"}'] >= 1
    assert 'aifs_tier_used_bytes{tier="nvme"}' in samples
    assert REGISTRY.get_sample_value("aifs_upload_backlog_blocks") is None  # collector gone after close
