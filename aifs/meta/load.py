"""Loading a dump into an empty engine.

The dump is read and checked whole before the load (aifs.meta.dump.verify_dump), so one cut
short or damaged never reaches the engine. The records go in batches, and the volume record
goes last, with the counters, in one batch: an engine whose load stopped part way holds no
volume record, so nothing mistakes it for a volume. A load that fails while writing empties
the engine again, or says how much it left.
"""

from typing import BinaryIO

from aifs.meta import contents, keys
from aifs.meta.dump import DumpReader, NoVolume, Trailer, read_volume
from aifs.meta.kv import Batch, Conflict, KVStore
from aifs.units import size

BATCH_KEYS = 2000
BATCH_BYTES = 4 << 20


class NotEmpty(Exception):
    """The engine already holds something; a load needs an empty one."""


class LoadFailed(Exception):
    """The load stopped part way. `remaining` is how many keys of it the engine still holds
    (0: it was emptied again; None: that could not be told)."""

    def __init__(self, reason: str, remaining: int | None) -> None:
        super().__init__(reason)
        self.remaining = remaining


def check_empty(kv: KVStore) -> None:
    """Raise NotEmpty, saying what the engine holds, unless it holds nothing."""
    if contents.is_empty(kv):
        return
    try:
        volume = read_volume(kv)
    except NoVolume:
        count = contents.count_plain(kv)
        what = "non-zero counters" if count == 0 else f"{count} key" + ("s" if count > 1 else "")
        raise NotEmpty(f"it holds {what} but no volume record (a load that stopped part way?)") from None
    raise NotEmpty(f"it holds volume {volume['uuid']} (block size {size(volume['block_size'])})")


def load_dump(kv: KVStore, stream: BinaryIO, name: str) -> Trailer:
    """Load the dump in `stream` into the empty engine `kv`; LoadFailed if it cannot finish."""
    try:
        reader = DumpReader(stream, name)
        _write(kv, reader)
    except Conflict:
        raise LoadFailed("a volume was created in the engine while it was loading (a mount of it?)",
                         _count(kv)) from None
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - whatever stopped it, the partial load goes
        raise LoadFailed(_reason(e), _undo(kv)) from e
    return reader.trailer


def _write(kv: KVStore, reader: DumpReader) -> None:
    """Every record in batches, holding the volume record back for the last one."""
    volume_record = b""
    batch, nbytes = _batch(), 0
    for key, value in reader.records():
        if key == keys.VOLUME:
            volume_record = value
            continue
        batch.put(key, value)
        nbytes += len(key) + len(value)
        if len(batch.ops) >= BATCH_KEYS or nbytes >= BATCH_BYTES:
            kv.commit(batch)
            batch, nbytes = _batch(), 0
    for name, value in reader.trailer.counters.items():
        if value:
            batch.add(keys.counter(name.encode()), value)
    batch.put(keys.VOLUME, volume_record)
    kv.commit(batch)
    kv.sync()


def _batch() -> Batch:
    """A batch that commits only while no volume record exists: none that the load did not write."""
    batch = Batch()
    batch.expect(keys.VOLUME, None)
    return batch


def _reason(error: BaseException) -> str:
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
    return str(error) or type(error).__name__


def _undo(kv: KVStore) -> int | None:
    try:
        contents.clear(kv)
    except Exception:  # noqa: BLE001 - the engine that failed the load may fail this too; say what is left
        pass
    return _count(kv)


def _count(kv: KVStore) -> int | None:
    try:
        return contents.count_plain(kv)
    except Exception:  # noqa: BLE001 - an engine that cannot be read any more
        return None
