"""`aifs meta dump` and `aifs meta load`: move a volume's metadata between engines (RocksDB
and Redis, or RocksDB with another shard count) through a portable dump file."""

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import click
from tqdm import tqdm
from tqdm.utils import CallbackIOWrapper

from aifs.cli.common import config_option, fail, load_or_exit, state_dir_option
from aifs.cli.engine_access import emptying_hint, engine_name, open_engine
from aifs.config import Config
from aifs.meta import keys
from aifs.meta.dump import DumpError, DumpReader, NoVolume, read_volume, verify_dump, write_dump
from aifs.meta.load import LoadFailed, NotEmpty, check_empty, load_dump
from aifs.units import size

STDOUT = Path("-")
WRITE_BUFFER = 1 << 20


@click.group()
def meta() -> None:
    """The metadata engine: dump a volume to a portable file, load one into an empty engine."""


@meta.command()
@config_option
@state_dir_option
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False, allow_dash=True), default="-")
def dump(config_path: Path | None, state_dir: Path | None, file: Path) -> None:
    """Write everything the volume's metadata engine holds to FILE (default -: standard output).

    The dump is a versioned msgpack stream (header, every key in key order, a trailer with
    counters, counts and a checksum) that `aifs meta load` reads into any engine. An embedded
    (RocksDB) volume must not be mounted; a Redis engine can be dumped while mounted, but a
    dump of a volume that is being written is not a point-in-time copy: unmount it, or dump
    while it is quiet. FILE must not exist yet: a dump never overwrites one.
    """
    config = load_or_exit(config_path, state_dir)
    _check_output(file)
    with open_engine(config, "dump", writable=False) as kv:
        try:
            volume = read_volume(kv)
        except NoVolume as e:
            fail(f"nothing to dump on {engine_name(config)}: {e}; format one with `aifs format`")
        if kv.shared:
            click.echo("aifs: the dump of a shared engine is a point-in-time copy only if no mount writes "
                       "to the volume meanwhile", err=True)
        with _output(file) as out, _bar("dump", unit=" keys") as bar:
            trailer = write_dump(kv, out, bar.update)
    where = "standard output" if file == STDOUT else file
    click.echo(f"dumped volume {volume['uuid']} from {engine_name(config)} to {where}: {trailer.summary()}",
               err=file == STDOUT)
    pending = trailer.counts.get(keys.UPLOAD, 0)
    if pending:
        click.echo(f"aifs: {pending} blocks were still waiting for upload to the durable tier; their bytes are "
                   "only in the NVMe staging of the node that wrote them: mount the volume there and run "
                   "`aifs sync --wait` before moving it, or their files read back with EIO", err=True)


@meta.command()
@config_option
@state_dir_option
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False, exists=True))
def load(config_path: Path | None, state_dir: Path | None, file: Path) -> None:
    """Load the dump FILE (made by `aifs meta dump`) into the empty metadata engine of the config.

    FILE is read and checked whole before anything is written: a dump that was cut short or
    damaged is refused and the engine stays as it was. An engine that holds anything is
    refused. Counters (ids, usage) are restored exactly. If the load fails part way, the
    engine is emptied again; if even that fails, the message says what is left and how to
    remove it. Mount the volume with this config afterwards; it keeps the dumped volume's
    uuid, so its S3 bucket is the same.
    """
    config = load_or_exit(config_path, state_dir)
    with _reading(file, "verify") as stream:
        volume = _verified(stream, str(file)).volume
    with open_engine(config, "load into", writable=True) as kv:
        try:
            check_empty(kv)
        except NotEmpty as e:
            fail(f"cannot load into {engine_name(config)}: {e}; a load needs an empty engine: point the config "
                 f"at a new one (another state_dir, or another Redis database), or {emptying_hint(config)}")
        with _reading(file, "load") as stream:
            try:
                trailer = load_dump(kv, stream, str(file))
            except LoadFailed as e:
                fail(_load_failure(config, e))
    click.echo(f"loaded volume {volume['uuid']} (block size {size(volume['block_size'])}) into "
               f"{engine_name(config)}: {trailer.summary()}")


def _check_output(file: Path) -> None:
    if file == STDOUT and sys.stdout.isatty():
        fail("a dump is binary: name a FILE, or redirect standard output to one")
    if file != STDOUT and os.path.lexists(file):
        fail(f"{file} exists; a dump never overwrites a file: remove it or name another")


@contextmanager
def _output(file: Path) -> Iterator[BinaryIO]:
    """Where the dump goes. A file appears under its name only once it is whole (written to a
    temporary name beside it, synced, then linked), so a failed dump leaves no partial file."""
    if file == STDOUT:
        with _writing(file):
            yield sys.stdout.buffer
            sys.stdout.buffer.flush()
        return
    with _writing(file):
        fd, temporary = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.", suffix=".partial")
    try:
        with _writing(file):
            with os.fdopen(fd, "wb", buffering=WRITE_BUFFER) as out:
                yield out
                out.flush()
                os.fsync(out.fileno())
            os.link(temporary, file)
    finally:
        os.unlink(temporary)


@contextmanager
def _writing(file: Path) -> Iterator[None]:
    """A failure to write the dump ends the command with one line."""
    try:
        yield
    except FileExistsError:
        fail(f"{file} appeared while the dump was written; the dump was not kept")
    except OSError as e:
        fail(f"cannot write the dump to {'standard output' if file == STDOUT else file}: {e.strerror or e}")


def _verified(stream: BinaryIO, name: str) -> DumpReader:
    try:
        return verify_dump(stream, name)
    except DumpError as e:
        fail(f"refusing the dump: {e}; nothing was loaded")
    except OSError as e:
        fail(f"cannot read {name}: {e.strerror or e}")


@contextmanager
def _reading(file: Path, what: str) -> Iterator[BinaryIO]:
    """The dump file, its bytes counted on a progress bar when standard error is a terminal."""
    try:
        stream = open(file, "rb")
    except OSError as e:
        fail(f"cannot read {file}: {e.strerror or e}")
    with stream, _bar(what, total=os.fstat(stream.fileno()).st_size, unit="B", unit_scale=True) as bar:
        yield CallbackIOWrapper(bar.update, stream, "read")


def _bar(what: str, **counting) -> tqdm:
    return tqdm(desc=what, file=sys.stderr, disable=not sys.stderr.isatty(), **counting)


def _load_failure(config: Config, error: LoadFailed) -> str:
    said = f"the load into {engine_name(config)} stopped: {error}"
    if error.remaining == 0:
        return f"{said}; the engine was emptied again"
    left = "an unknown number of" if error.remaining is None else str(error.remaining)
    return f"{said}; {left} keys of it remain there: {emptying_hint(config)} before loading again"
