"""`aifs config check|show`: find config mistakes before a mount does."""

import json
from pathlib import Path
from typing import Any

import click

from aifs.cli.common import load_or_exit, state_dir_option
from aifs.config import Config, format_size, machine_warnings
from aifs.units import size

_SIZE_KEYS = frozenset({"block_size", "capacity", "max_size"})

@click.group()
def config() -> None:
    """Validate and inspect an aifs.toml config file."""


@config.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@state_dir_option
def check(file: Path, state_dir: Path | None) -> None:
    """Validate FILE before mounting with it.

    Prints a one-line summary and exits 0 (after a warning for each capacity larger than
    this machine has), or prints the problem (key, value, what is allowed) to stderr and
    exits 2.
    """
    cfg = load_or_exit(file, state_dir)
    for warning in machine_warnings(cfg):
        click.echo(f"{file}: warning: {warning}", err=True)
    click.echo(f"{file}: ok: {summary(cfg)}")


@config.command()
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@state_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of TOML.")
def show(file: Path | None, state_dir: Path | None, as_json: bool) -> None:
    """Print the config a mount would use.

    FILE defaults to the built-in config. Defaults are filled in and auto capacities,
    tier paths and the log file are resolved.
    """
    cfg = load_or_exit(file, state_dir)
    data = effective(cfg)
    click.echo(json.dumps(data, indent=2) if as_json else _toml(data, cfg))


def summary(cfg: Config) -> str:
    """One line: what a mount with this config would use."""
    tiers = " > ".join(
        f"{t.kind} {size(cfg.capacity_of(t))}"
        + (" (auto)" if t.capacity is None else "")
        for t in cfg.tiers
    )
    return (
        f"volume {cfg.volume.name!r}, state dir {cfg.volume.state_dir}, "
        f"block {format_size(cfg.volume.block_size)}, tiers {tiers}"
    )


def effective(cfg: Config) -> dict[str, Any]:
    """The config as plain data, with tier paths, capacities and the log file resolved."""
    data = cfg.model_dump(mode="json")
    for item, tier in zip(data["tiers"], cfg.tiers):
        item["capacity"] = cfg.capacity_of(tier)
        if tier.default_dir is None:
            del item["path"]
        else:
            item["path"] = str(cfg.tier_path(tier))
    data["logging"]["file"] = str(cfg.log_file())
    return data


def _toml(data: dict[str, Any], cfg: Config) -> str:
    """TOML text of `data`; auto capacities are marked so they are not mistaken for settings."""
    lines = ["# effective aifs config: defaults filled in, auto capacities resolved"]
    for section, value in data.items():
        header = f"[[{section}]]" if isinstance(value, list) else f"[{section}]"
        for index, table in enumerate(value if isinstance(value, list) else [value]):
            auto = section == "tiers" and cfg.tiers[index].capacity is None
            lines += ["", header, *_pairs(table, {"capacity": "auto"} if auto else {})]
    return "\n".join(lines)


def _pairs(table: dict[str, Any], notes: dict[str, str]) -> list[str]:
    return [
        f"{key} = {_toml_value(key, value)}" + (f"  # {notes[key]}" if key in notes else "")
        for key, value in table.items()
        if value is not None  # TOML has no null: an unset key is simply absent
    ]


def _toml_value(key: str, value: Any) -> str:
    if key in _SIZE_KEYS and isinstance(value, int):
        value = format_size(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(k, v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(key, v) for v in value) + "]"
    return repr(value)
