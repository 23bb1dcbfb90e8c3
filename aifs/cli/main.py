"""Entry point of the `aifs` command: one group, one module per sub-command."""

import click

from aifs.cli.admin_cmd import status, sync
from aifs.cli.bench_cmd import bench
from aifs.cli.config_cmd import config
from aifs.cli.flash_cmd import flash
from aifs.cli.fsck_cmd import fsck
from aifs.cli.gc_cmd import gc
from aifs.cli.mount_cmd import mount, umount
from aifs.cli.tier_cmd import pin, unpin, warmup


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="aifs")
def cli() -> None:
    """aifs: a POSIX filesystem for AI training clusters."""


for command in (mount, umount, config, fsck, gc, bench, status, sync, flash, pin, unpin, warmup):
    cli.add_command(command)
