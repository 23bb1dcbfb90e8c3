"""`aifs format`: the volume is created in the configured engine and claims its bucket; a
second format changes nothing, and a mount joins the formatted volume. A bucket that another
volume claimed, a block size the volume was not formatted with, or an engine that holds
something other than a volume is refused with one line, and leaves the engine as it was.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import cli_helpers
from cli_helpers import aifs, refused
from conftest import CONFIG_TEMPLATE, Volume
from redisserver import RedisServer
from s3.conftest import MotoServer, moto_server  # noqa: F401 - the fixture
from s3.helpers_mount import PREFIX, S3Setup

from aifs.meta import keys
from aifs.meta.kv import Batch
from aifs.meta.rocks_kv import ShardedRocksKV
from aifs.tiers.s3_marker import MARKER_NAME

pytestmark = pytest.mark.timeout_s(300)
UUID_AT = 2  # "formatted volume UUID ..." / "... already holds volume UUID ..."


def aifs_ok(*args: object) -> subprocess.CompletedProcess:
    return cli_helpers.aifs_ok(*args, quiet=True)


def formatted_uuid(cp: subprocess.CompletedProcess) -> str:
    first = cp.stdout.splitlines()[0]
    assert first.startswith("formatted volume "), cp.stdout
    return first.split()[UUID_AT]


def dump_of(config: Path, path: Path) -> bytes:
    aifs_ok("meta", "dump", "-c", config, path)
    return path.read_bytes()


@pytest.fixture
def configs(tmp_path) -> Callable[..., Path]:
    """Factory of config files, each with a state directory of its own beside it: tests/conftest.py's
    volume with `extra` appended, or what `render(state_dir)` makes."""

    def make(name: str, extra: str = "", render: Callable[[Path], str] | None = None) -> Path:
        config = tmp_path / name / "aifs.toml"
        config.parent.mkdir()
        state_dir = config.parent / "state"
        config.write_text(render(state_dir) if render else CONFIG_TEMPLATE.format(state_dir=state_dir) + extra)
        return config

    return make


def test_a_second_format_says_which_volume_it_is_and_changes_nothing(configs, tmp_path):
    config = configs("twice")
    first = aifs_ok("format", "-c", config)
    uuid = formatted_uuid(first)
    assert "block size 4.0 MiB" in first.stdout and "claimed the durable tier" in first.stdout
    before = dump_of(config, tmp_path / "before.dump")
    second = aifs_ok("format", "-c", config)
    assert f"already holds volume {uuid} (block size 4.0 MiB, format 1)" in second.stdout
    assert "nothing changed" in second.stdout
    assert dump_of(config, tmp_path / "after.dump") == before


def test_a_mount_joins_the_formatted_volume(tmp_path):
    volume = Volume(tmp_path / "joined")
    try:
        uuid = formatted_uuid(aifs_ok("format", "-c", volume.config))
        volume.mount()
        (volume.path / "file").write_bytes(b"data")
        refused(aifs("format", "-c", volume.config), "mounted at", "unmount it first")
        volume.umount()
        assert f"already holds volume {uuid}" in aifs_ok("format", "-c", volume.config).stdout
        assert f"dumped volume {uuid} " in aifs_ok("meta", "dump", "-c", volume.config, tmp_path / "d").stdout
    finally:
        volume.close()


def test_a_block_size_the_volume_was_not_formatted_with_is_refused(configs, tmp_path):
    config = configs("block-size")
    aifs_ok("format", "-c", config)
    before = dump_of(config, tmp_path / "before.dump")
    config.write_text(config.read_text().replace("[volume]\n", '[volume]\nblock_size = "1MiB"\n'))
    refused(aifs("format", "-c", config), "volume.block_size = 1048576", "set block_size = 4194304")
    assert dump_of(config, tmp_path / "after.dump") == before


def test_an_engine_left_with_keys_but_no_volume_is_refused(configs):
    config = configs("leftover")
    state_dir = config.parent / "state"
    (state_dir / "meta").mkdir(parents=True)
    kv = ShardedRocksKV(state_dir / "meta", 8)
    batch = Batch()
    batch.put(keys.inode(5), b"left by a load that stopped")
    kv.commit(batch)
    kv.close()
    refused(aifs("format", "-c", config), "holds 1 key but no volume record", f"remove the directory {state_dir / 'meta'}")


def test_format_on_redis(configs, tmp_path):
    server = RedisServer(tmp_path / "redis-server")
    server.start()
    try:
        config = configs("redis", f'\n[meta]\nurl = "{server.url}"\n')
        first = aifs_ok("format", "-c", config)
        uuid = formatted_uuid(first)
        assert f"on {server.url}" in first.stdout
        assert f"{server.url} already holds volume {uuid}" in aifs_ok("format", "-c", config).stdout
        server.kill()
        refused(aifs("format", "-c", config), "cannot reach the metadata server")
    finally:
        server.kill()


# -- the bucket's volume marker ------------------------------------------------------------------


@pytest.fixture
def moto(moto_server) -> MotoServer:
    return moto_server


def marker_uuid(moto: MotoServer, bucket: str) -> str | None:
    try:
        body = moto.client().get_object(Bucket=bucket, Key=PREFIX + MARKER_NAME)["Body"].read()
    except moto.client().exceptions.NoSuchKey:
        return None
    return json.loads(body)["uuid"]


def test_a_bucket_that_another_volume_claimed_is_refused(configs, moto, tmp_path):
    bucket = moto.create_bucket()
    first = configs("first", render=S3Setup(moto.endpoint, bucket).render)
    second = configs("second", render=S3Setup(moto.endpoint, bucket).render)
    uuid = formatted_uuid(aifs_ok("format", "-c", first))
    assert marker_uuid(moto, bucket) == uuid
    refused(aifs("format", "-c", second), "belongs to another aifs volume", f"its marker says uuid {uuid}",
            "Nothing was created")
    assert marker_uuid(moto, bucket) == uuid
    refused(aifs("meta", "dump", "-c", second, tmp_path / "d"), "holds no aifs volume")
    second.write_text(S3Setup(moto.endpoint, bucket, prefix="elsewhere/").render(second.parent / "state"))
    aifs_ok("format", "-c", second)  # the refused format left the engine empty


def test_a_format_whose_marker_went_missing_writes_it_again(configs, moto):
    bucket = moto.create_bucket()
    config = configs("remark", render=S3Setup(moto.endpoint, bucket).render)
    uuid = formatted_uuid(aifs_ok("format", "-c", config))
    moto.client().delete_object(Bucket=bucket, Key=PREFIX + MARKER_NAME)
    again = aifs_ok("format", "-c", config)
    assert f"claimed the durable tier s3://{bucket}/{PREFIX} for it (its marker was missing)" in again.stdout
    assert marker_uuid(moto, bucket) == uuid
