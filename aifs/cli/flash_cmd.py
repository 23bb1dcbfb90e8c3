"""`aifs flash`: run a block server of the remote flash tier on a flash node."""

import logging
import sys
from pathlib import Path

import click
from pydantic import ByteSize, TypeAdapter, ValidationError

from aifs.rdma.transport import Address, TransportUnavailable
from aifs.rdma.verbs_server import ARENA_BYTES, SLOT_BYTES

_BYTES = TypeAdapter(ByteSize)


class _Size(click.ParamType):
    """Sizes as the config file writes them ("8GiB"); a bare number is bytes."""

    name = "size"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return int(_BYTES.validate_python(value))
        except ValidationError:
            self.fail(f"{value!r} is not a size; use bytes or a string like '8GiB'", param, ctx)


class _Listen(click.ParamType):
    name = "host:port"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> Address:
        if isinstance(value, Address):
            return value
        try:
            return Address.parse(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


SIZE = _Size()


@click.group()
def flash() -> None:
    """Block servers of the remote flash tier."""


@flash.command()
@click.option("--dir", "root", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Where the server keeps its blocks (created if missing).")
@click.option("--capacity", required=True, type=SIZE, help="Byte budget, e.g. 8GiB; LRU eviction keeps to it.")
@click.option("--listen", required=True, type=_Listen(), help="HOST:PORT to accept clients on (port 0: any free).")
@click.option("--transport", type=click.Choice(["auto", "tcp", "verbs"]), default="auto", show_default=True,
              help="auto serves RDMA READs too when pyverbs imports and a device is present.")
@click.option("--rdma-device", default=None, help="RDMA device name (default: the first one).")
@click.option("--rdma-memory", type=SIZE, default=ARENA_BYTES, show_default=True,
              help="Memory registered for RDMA reads of hot blocks.")
@click.option("--rdma-slot", type=SIZE, default=SLOT_BYTES, show_default=True,
              help="Slot size of that memory: larger blocks are served over TCP.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
def serve(root: Path, capacity: int, listen: Address, transport: str, rdma_device: str | None, rdma_memory: int,
          rdma_slot: int, log_level: str) -> None:
    """Serve immutable blocks from DIR to every mount that lists this server.

    Prints one line "serving HOST:PORT over TRANSPORT" once it accepts clients;
    stops cleanly on SIGTERM or SIGINT.
    """
    from aifs.flash.server import run  # trio and the store only for this command

    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    def ready(address: Address, kind: str) -> None:
        click.echo(f"serving {address} over {kind}")
        sys.stdout.flush()

    try:
        run(root, capacity, listen, transport, rdma_device, rdma_memory, rdma_slot, ready)
    except TransportUnavailable as e:
        raise click.UsageError(str(e)) from None
    except OSError as e:
        click.echo(f"aifs flash serve: {e}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    flash()
