"""`aifs flash`: run a block server of the remote flash tier on a flash node, and make its secret."""

import logging
import sys
from pathlib import Path

import click
from pydantic import ByteSize, TypeAdapter, ValidationError

from aifs.cli.logsetup import LOG_FORMAT
from aifs.cli.sdnotify import notify
from aifs.flash.limits import ServerLimits
from aifs.push.serving import FLASH_SERVER, ServedTransforms, served_transforms
from aifs.rdma.auth import Secret, SecretFileError, write_secret_file
from aifs.rdma.transport import Address, TransportUnavailable
from aifs.rdma.verbs_server import ARENA_BYTES, SLOT_BYTES

_BYTES = TypeAdapter(ByteSize)


class _Size(click.ParamType):
    """Sizes as the config file writes them ("8GiB"); a bare number is bytes."""

    name = "size"

    def __init__(self, positive: bool = False) -> None:
        self.positive = positive

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            size = value if isinstance(value, int) else int(_BYTES.validate_python(value))
        except ValidationError:
            self.fail(f"{value!r} is not a size; use bytes or a string like '8GiB'", param, ctx)
        if self.positive and size <= 0:
            self.fail(f"{value!r} is no size at all; give at least one byte", param, ctx)
        return size


class _Listen(click.ParamType):
    name = "host:port"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> Address:
        if isinstance(value, Address):
            return value
        try:
            return Address.parse(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


class _SecretFile(click.ParamType):
    """A secret file, read and checked (owner-only, long enough) before the server starts."""

    name = "file"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> Secret:
        if isinstance(value, Secret):
            return value
        try:
            return Secret.from_file(Path(str(value)))
        except SecretFileError as e:
            self.fail(str(e), param, ctx)


SIZE = _Size()
POSITIVE_SIZE = _Size(positive=True)
LIMITS = ServerLimits()
NO_SECRET = ("--secret-file is required: clients must prove they hold the volume's secret. Make one with "
             "`aifs flash secret FILE`, then give the same file to every server (--secret-file FILE) and "
             "every mount (secret_file = \"FILE\" in the remote tier).")


@click.group()
def flash() -> None:
    """Block servers of the remote flash tier."""


@flash.command()
@click.option("--dir", "root", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Where the server keeps its blocks (created if missing).")
@click.option("--capacity", required=True, type=SIZE, help="Byte budget, e.g. 8GiB; LRU eviction keeps to it.")
@click.option("--listen", required=True, type=_Listen(), help="HOST:PORT to accept clients on (port 0: any free).")
@click.option("--secret-file", "secret", type=_SecretFile(),
              help="The volume's secret (from `aifs flash secret FILE`); required.")
@click.option("--transport", type=click.Choice(["auto", "tcp", "verbs"]), default="auto", show_default=True,
              help="auto serves RDMA READs too when pyverbs imports and a device is present.")
@click.option("--rdma-device", default=None, help="RDMA device name (default: the first one).")
@click.option("--rdma-memory", type=SIZE, default=ARENA_BYTES, show_default=True,
              help="Memory registered for RDMA reads of hot blocks.")
@click.option("--rdma-slot", type=SIZE, default=SLOT_BYTES, show_default=True,
              help="Slot size of that memory: larger blocks are served over TCP.")
@click.option("--max-block-size", type=POSITIVE_SIZE, default=f"{LIMITS.max_block >> 20}MiB", show_default=True,
              help="Larger puts are refused before their bytes are read; at least the volumes' block_size.")
@click.option("--max-request-memory", type=POSITIVE_SIZE, default=f"{LIMITS.max_request_memory >> 20}MiB",
              show_default=True,
              help="Memory for blocks being received or sent, all clients together; requests wait for room.")
@click.option("--max-connections", type=click.IntRange(min=1), default=LIMITS.max_connections, show_default=True,
              help="Connections beyond it are told the server is busy and closed.")
@click.option("--idle-timeout", type=click.FloatRange(min=0, min_open=True), default=LIMITS.idle_timeout,
              show_default=True, help="Seconds after which a connection that sends nothing is closed.")
@click.option("--transforms", default="", metavar="NAMES",
              help="Transforms clients may run over the blocks here (aifs push): a comma-separated list of "
                   "filter, mask, tokenize. None by default.")
@click.option("--mask-patterns", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="A TOML file of named mask patterns to register besides the built-in email and phone.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
def serve(root: Path, capacity: int, listen: Address, secret: Secret | None, transport: str,
          rdma_device: str | None, rdma_memory: int, rdma_slot: int, max_block_size: int, max_request_memory: int,
          max_connections: int, idle_timeout: float, transforms: str, mask_patterns: Path | None,
          log_level: str) -> None:
    """Serve immutable blocks from DIR to every mount that lists this server and holds its secret.

    Prints one line "serving HOST:PORT over TRANSPORT" once it accepts clients;
    stops cleanly on SIGTERM or SIGINT.
    """
    from aifs.flash.server import run  # trio and the store only for this command

    if secret is None:
        raise click.UsageError(NO_SECRET)
    try:
        limits = ServerLimits(max_block=max_block_size, max_request_memory=max_request_memory,
                              max_connections=max_connections, idle_timeout=idle_timeout)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    served = _served_transforms(transforms, mask_patterns)
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr, format=LOG_FORMAT)

    def ready(address: Address, kind: str) -> None:
        click.echo(f"serving {address} over {kind}")
        sys.stdout.flush()
        notify("READY=1")  # a systemd unit of Type=notify (deploy/systemd/aifs-flash@.service)

    try:
        run(root, capacity, listen, secret, limits, transport, rdma_device, rdma_memory, rdma_slot, ready, served)
    except TransportUnavailable as e:
        raise click.UsageError(str(e)) from None
    except OSError as e:
        click.echo(f"aifs flash serve: {e}", err=True)
        sys.exit(1)


def _served_transforms(names: str, mask_patterns: Path | None) -> ServedTransforms | None:
    """What --transforms and --mask-patterns enable; a usage error for what cannot be."""
    try:
        served = served_transforms(names.split(","), mask_patterns, FLASH_SERVER)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    return served if served.enabled else None


@flash.command()
@click.argument("path", type=click.Path(path_type=Path, dir_okay=False))
def secret(path: Path) -> None:
    """Write a new random secret to PATH, readable by its owner only (never replacing a file).

    Give the same file to every block server of a volume (--secret-file) and to every
    mount (secret_file in the remote tier); whoever holds it can read and change the
    blocks on those servers.
    """
    try:
        write_secret_file(path)
    except SecretFileError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"wrote a new secret to {path} (mode 600); copy it to every server and mount of the volume, "
               f"keeping it readable by their owners only")


if __name__ == "__main__":
    flash()
