"""Opening the metadata engine a config names, for commands that work on the engine itself
(format, meta dump, meta load) rather than through a mount.

The embedded engine belongs to one process: such a command takes the state directory's
volume lock as fsck does (read-only to look, exclusive to write), so it never runs beside a
mount of that volume. A shared engine is opened as the mounts open it.
"""

from collections.abc import Iterator
from contextlib import contextmanager

from aifs.cli.common import fail
from aifs.config import Config
from aifs.errors import FsError
from aifs.meta.engines import open_kv, redact
from aifs.meta.kv import KVStore
from aifs.vfs.statedir import StateDirError, VolumeBusy, VolumeLock, prepare_state_dir


def engine_name(config: Config) -> str:
    """The engine as an operator names it, without any password its URL holds."""
    if config.meta.engine == "rocksdb":
        return f"rocksdb at {config.volume.state_dir / 'meta'}"
    return redact(config.meta.url)


def emptying_hint(config: Config) -> str:
    """How an operator empties the engine (what is left of a load that stopped part way)."""
    if config.meta.engine == "rocksdb":
        return f"remove the directory {config.volume.state_dir / 'meta'} (no mount uses it)"
    return (f"empty the database of {engine_name(config)} while no node mounts it "
            "(redis-cli -u URL FLUSHDB: a volume has its database to itself)")


@contextmanager
def open_engine(config: Config, purpose: str, writable: bool) -> Iterator[KVStore]:
    """The configured engine for `purpose` (a verb: "dump", "load into"). What keeps the
    command from using it (no volume there, mounted, unreachable, failing) ends the command
    with one line."""
    with _embedded_lock(config, purpose, writable):
        try:
            kv = open_kv(config, read_only=not writable)
        except (OSError, ValueError) as e:
            fail(f"cannot open the metadata engine ({engine_name(config)}): {e}")
        try:
            yield kv
        except FsError as e:  # the engine failed under the command: unreachable, its disk full
            fail(f"cannot {purpose} {engine_name(config)}: {e}")
        finally:
            kv.close()


@contextmanager
def _embedded_lock(config: Config, purpose: str, writable: bool) -> Iterator[None]:
    """The volume lock of an embedded engine's state directory; nothing for a shared engine."""
    if config.meta.engine != "rocksdb":
        yield
        return
    state_dir = config.volume.state_dir
    try:
        if writable:
            prepare_state_dir(state_dir)
        elif not (state_dir / "meta" / "CURRENT").exists():
            fail(f"cannot {purpose} {engine_name(config)}: it holds no metadata; "
                 "check volume.state_dir in the config (or --state-dir)")
        lock = VolumeLock.acquire(state_dir, purpose, read_only=not writable)
    except VolumeBusy as e:
        fail(f"cannot {purpose} {engine_name(config)}: {e}; unmount it first")
    except StateDirError as e:
        fail(str(e))
    try:
        yield
    finally:
        lock.close()
