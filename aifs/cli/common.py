"""Helpers every sub-command shares: loading the config, failing with a clear message."""

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from aifs.config import Config, ConfigError, load_config

EXIT_USAGE = 2
EXIT_FAILED = 1


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    click.echo(f"aifs: {message}", err=True)
    sys.exit(code)


def load_or_exit(config_path: Path | None, state_dir: Path | None) -> Config:
    try:
        return load_config(config_path, state_dir)
    except ConfigError as e:
        fail(str(e), EXIT_USAGE)


config_option = click.option(
    "-c", "--config", "config_path", type=click.Path(path_type=Path, dir_okay=False),
    help="TOML config file (default: the embedded single-machine config).",
)
state_dir_option = click.option(
    "--state-dir", type=click.Path(path_type=Path, file_okay=False),
    help="Override volume.state_dir (metadata, tiers and log of the volume).",
)


def line_printer(as_json: bool) -> Callable[[Any], None]:
    """Print report items (findings, summaries) as text lines or as JSON objects, one per line."""
    if as_json:
        return lambda item: click.echo(json.dumps(item.as_json()))
    return lambda item: click.echo(item.line())
