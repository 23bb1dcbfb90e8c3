"""`aifs format`: create the volume in the metadata engine the config names, and claim its
durable tier; on an engine that already holds a volume, say which and change nothing."""

from pathlib import Path
from typing import Any

import click

from aifs.blockstore.compose import open_cold
from aifs.cli.common import config_option, fail, load_or_exit, state_dir_option
from aifs.cli.engine_access import emptying_hint, engine_name, open_engine
from aifs.config import Config
from aifs.meta import MetaEngine, contents, usage
from aifs.meta.dump import NoVolume, read_volume
from aifs.meta.kv import KVStore
from aifs.meta.load import NotEmpty, check_empty
from aifs.tiers.s3_marker import MarkerMode, S3SetupError
from aifs.tiers.s3_retry import S3Error
from aifs.units import size


@click.command("format")
@config_option
@state_dir_option
def format_volume(config_path: Path | None, state_dir: Path | None) -> None:
    """Create the volume of the config: its record (uuid, block size), root directory and
    counters in the metadata engine ([meta] url, or RocksDB in the state directory), and
    the volume marker that ties the S3 bucket prefix to it. Mounts then join this volume.

    On an engine that already holds a volume this says which (uuid, block size) and changes
    nothing, but for writing the bucket's marker if an interrupted format left it out.
    Exit status: 0 the engine holds a volume that agrees with the config and owns the
    durable tier, 1 refused or failed (the bucket belongs to another volume, the block size
    differs, the engine holds something else or cannot be reached), 2 a bad config.
    """
    config = load_or_exit(config_path, state_dir)
    with open_engine(config, "format", writable=True) as kv:
        try:
            volume = read_volume(kv)
        except NoVolume:
            _create(config, kv)
        else:
            _check_existing(config, kv, volume)


def _create(config: Config, kv: KVStore) -> None:
    """Format the empty engine, then claim the durable tier; a tier that refuses the new volume
    (another volume's marker) leaves the engine empty again."""
    name = engine_name(config)
    try:
        check_empty(kv)
    except NotEmpty as e:
        fail(f"cannot format {name}: {e}; {emptying_hint(config)}, then format again")
    volume = MetaEngine(kv, config.volume.block_size).volume
    try:
        where, _ = _claim(config, volume, MarkerMode.CLAIM)
    except (S3SetupError, OSError) as e:
        contents.clear(kv)
        fail(f"cannot format: {e}. Nothing was created on {name}")
    click.echo(f"formatted volume {_describe(volume)} on {name}")
    click.echo(f"claimed the durable tier {where} for it")


def _check_existing(config: Config, kv: KVStore, volume: dict[str, Any]) -> None:
    """Say which volume the engine holds; refuse a config or a durable tier that disagrees."""
    click.echo(f"{engine_name(config)} already holds volume {_describe(volume)}")
    if volume["block_size"] != config.volume.block_size:
        fail(f"the config says volume.block_size = {config.volume.block_size}, but volume {volume['uuid']} "
             f"was formatted with {volume['block_size']}; set block_size = {volume['block_size']} in the "
             "config (a volume's block size is fixed when it is formatted)")
    holds_data = kv.counter(usage.BYTES) > 0
    try:
        where, claimed = _claim(config, volume, MarkerMode.EXPECT if holds_data else MarkerMode.CLAIM)
    except (S3SetupError, OSError) as e:
        fail(str(e))
    if claimed:
        click.echo(f"claimed the durable tier {where} for it (its marker was missing)")
    else:
        click.echo(f"the durable tier {where} belongs to it; nothing changed")


def _claim(config: Config, volume: dict[str, Any], mode: MarkerMode) -> tuple[str, bool]:
    """Check the durable tier's volume marker, and write it as `mode` allows when it is missing:
    (the tier's URL, whether the marker was written now). Raises S3SetupError for a tier that
    belongs to another volume, OSError for one that cannot be reached."""
    missing = True
    try:
        cold = open_cold(config, volume, MarkerMode.CHECK)
        missing = cold.marker_missing
        cold.close()
    except S3Error as e:
        if e.code != "NoSuchBucket":
            raise
    if missing:
        cold = open_cold(config, volume, mode)
        cold.close()
    return cold.url(), missing


def _describe(volume: dict[str, Any]) -> str:
    return f"{volume['uuid']} (block size {size(volume['block_size'])}, format {volume['format']})"
