"""Entry point of the `aifs` command: one group, one module per sub-command.

A sub-command's module is imported only when that command runs (or help lists
them all): `aifs status` or `aifs sync --wait`, called from scripts after every
checkpoint, do not pay for importing boto3, RocksDB and the FUSE bindings.
"""

import importlib

import click

from aifs import __version__

COMMANDS = {  # name: "module:attribute"
    "mount": "aifs.cli.mount_cmd:mount",
    "umount": "aifs.cli.mount_cmd:umount",
    "mount-helper": "aifs.cli.mount_helper:mount_helper",
    "config": "aifs.cli.config_cmd:config",
    "fsck": "aifs.cli.fsck_cmd:fsck",
    "gc": "aifs.cli.gc_cmd:gc",
    "format": "aifs.cli.format_cmd:format_volume",
    "meta": "aifs.cli.meta_cmd:meta",
    "bench": "aifs.cli.bench_cmd:bench",
    "status": "aifs.cli.admin_cmd:status",
    "stats": "aifs.cli.stats_cmd:stats",
    "sync": "aifs.cli.admin_cmd:sync",
    "flash": "aifs.cli.flash_cmd:flash",
    "pin": "aifs.cli.tier_cmd:pin",
    "unpin": "aifs.cli.tier_cmd:unpin",
    "warmup": "aifs.cli.tier_cmd:warmup",
    "locate": "aifs.cli.locate_cmd:locate",
    "freeze": "aifs.cli.freeze_cmd:freeze",
    "thaw": "aifs.cli.freeze_cmd:thaw",
    "push": "aifs.cli.push_cmd:push",
    "pack": "aifs.cli.pack_cmd:pack",
}


class LazyGroup(click.Group):
    """A group whose sub-commands are imported by name when they are looked up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attribute = COMMANDS[name].split(":")
        return getattr(importlib.import_module(module), attribute)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, message="aifs %(version)s")
def cli() -> None:
    """aifs: a POSIX filesystem for AI training clusters."""
