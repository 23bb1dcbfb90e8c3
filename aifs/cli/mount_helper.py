"""`aifs mount-helper`: what mount(8) runs for a file system of type fuse.aifs.

For `mount -t fuse.aifs` and fstab lines such as

    aifs  /mnt/aifs  fuse.aifs  _netdev,config=/etc/aifs/train.toml  0 0

mount(8) runs /sbin/mount.fuse.aifs SOURCE MOUNTPOINT [-sfnv] [-o OPTIONS], a two-line script
(deploy/mount.fuse.aifs) that runs this command. It turns the options into the flags of
`aifs mount` and becomes `aifs mount --background`, so mount(8) returns, with its status,
once the mount answers. SOURCE is only a label: the config names the volume.
"""

import os
import sys
from pathlib import Path

import click

from aifs.cli.common import EXIT_USAGE, fail, load_or_exit

VALUED = {"config": "--config", "state_dir": "--state-dir"}
FLAGS = {"nonempty": "--nonempty", "accept_missing_marker": "--accept-missing-marker"}
# What aifs does anyway: rw (mount(8) adds it), default_permissions; what belongs to mount(8)
# and systemd: defaults, auto, noauto, nofail, _netdev, and the x-* options of userspace tools.
ALREADY_SO = frozenset({"rw", "default_permissions"})
NOT_OURS = frozenset({"defaults", "auto", "noauto", "nofail", "_netdev"})
UNDERSTOOD = ("config=FILE, state_dir=DIR, nonempty, accept_missing_marker, allow_other (as the config "
              "sets it), rw, default_permissions; ignored: defaults, auto, noauto, nofail, _netdev, x-*")


@click.command("mount-helper", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("source")
@click.argument("mountpoint", type=click.Path(path_type=Path))
@click.option("-o", "options", multiple=True, help="Comma-separated mount options.")
@click.option("-s", "sloppy", is_flag=True, help="Warn about unknown options instead of refusing them.")
@click.option("-f", "fake", is_flag=True, help="Check the options, mount nothing.")
@click.option("-n", "no_mtab", is_flag=True, help="Accepted for mount(8); aifs writes no mtab.")
@click.option("-v", "verbose", is_flag=True, help="Accepted for mount(8).")
@click.option("-t", "fstype", help="Accepted for mount(8) (fuse.aifs).")
def mount_helper(source: str, mountpoint: Path, options: tuple[str, ...], sloppy: bool, fake: bool,
                 **_for_mount8: object) -> None:
    """Mount a volume for mount(8): SOURCE MOUNTPOINT -o config=FILE,... (SOURCE is a label)."""
    flags = mount_flags([o for group in options for o in group.split(",") if o], sloppy)
    if fake:
        return
    argv = [sys.executable, "-m", "aifs", "mount", "--background", *flags, str(mountpoint.absolute())]
    os.execv(sys.executable, argv)


def mount_flags(options: list[str], sloppy: bool = False) -> list[str]:
    """The `aifs mount` flags for mount(8)'s options; an unknown one is refused (warned about
    and dropped with -s)."""
    paths: dict[str, str] = {}
    flags: list[str] = []
    allow_other = False
    for option in options:
        key, has_value, value = option.partition("=")
        if key in VALUED and has_value and value:
            paths[key] = str(Path(value).absolute())
        elif option in FLAGS:
            flags.append(FLAGS[option])
        elif option == "allow_other":
            allow_other = True
        elif not (option in ALREADY_SO or option in NOT_OURS or option.startswith("x-")):
            message = f"unknown mount option {option!r}; aifs understands {UNDERSTOOD}"
            if not sloppy:
                fail(message, EXIT_USAGE)
            click.echo(f"aifs: warning: {message}", err=True)
    if allow_other:
        _check_allow_other(paths.get("config"), paths.get("state_dir"))
    return [*(arg for key, path in paths.items() for arg in (VALUED[key], path)), *flags]


def _check_allow_other(config_path: str | None, state_dir: str | None) -> None:
    """allow_other is a setting of the config; the options may repeat it, never contradict it."""
    config = load_or_exit(Path(config_path) if config_path else None, Path(state_dir) if state_dir else None)
    if not config.fuse.allow_other:
        fail(f"mount option allow_other contradicts the config ({config_path or 'the default config'} sets "
             "[fuse] allow_other = false); set it to true there, or remove allow_other from the options",
             EXIT_USAGE)
