"""Serving a volume at a mountpoint until unmount or SIGINT/SIGTERM."""

import gc
import logging
import os
import signal
import threading
from pathlib import Path

import pyfuse3
import trio

from aifs.bypass.address import BypassUnavailable, Listening, listen
from aifs.bypass.server import BypassServer
from aifs.cluster.peers import PeerServeUnavailable
from aifs.config import Config
from aifs.control import SOCKET_NAME
from aifs.control.server import ControlServer
from aifs.fuse.attrs import Timeouts
from aifs.fuse.heap import keep_request_buffers
from aifs.fuse.invalidation import invalidate_kernel
from aifs.fuse.mountinfo import SOURCE_PREFIX, aifs_mount
from aifs.fuse.ops import AifsOperations
from aifs.fuse.preflight import MountRefused
from aifs.metrics import MetricsServer, MetricsUnavailable, serve_metrics
from aifs.rdma.transport import TransportUnavailable
from aifs.tiers.files import sync_filesystem
from aifs.tiers.s3_marker import S3SetupError
from aifs.vfs.admin import Admin
from aifs.vfs.exitrecord import ExitRecord
from aifs.vfs.orderhints import HintOps
from aifs.vfs.statedir import VolumeLock
from aifs.vfs.volume import Volume

log = logging.getLogger(__name__)


def mount_options(config: Config) -> set[str]:
    options = {
        f"fsname={SOURCE_PREFIX}{config.volume.state_dir}",
        "subtype=aifs",
        "default_permissions",
    }
    if config.fuse.allow_other:
        options.add("allow_other")
    return options


def serve(config: Config, mountpoint: Path, lock: VolumeLock, accept_missing_marker: bool = False) -> None:
    """Mount, serve requests on trio, and on the way out seal, sync and unmount; the exit
    record says whether that finished (see aifs.vfs.exitrecord). Raises MountRefused when the
    volume cannot be served, before anything is mounted."""
    keep_request_buffers()
    record = ExitRecord(os.getpid())
    record.write(config.volume.state_dir)
    metrics = volume = bypass = None
    try:
        metrics = serve_metrics(config.metrics)
        bypass = listen(config)
        volume = Volume(config, lock, accept_missing_marker, str(mountpoint))
        _serve(volume, config, mountpoint, metrics, bypass)
        record.finished = True
    except (MetricsUnavailable, BypassUnavailable, PeerServeUnavailable, S3SetupError, TransportUnavailable) as e:
        record.error = str(e)
        raise MountRefused(str(e)) from None
    except BaseException as e:
        record.error = f"{type(e).__name__}: {e}"
        raise
    finally:
        if metrics is not None:
            metrics.close()
        if bypass is not None:
            bypass.close()
        if volume is not None and volume.left_pending is not None:
            record.pending_blocks, record.pending_bytes = volume.left_pending
            record.durable_tier = volume.tiers.durable_url()
        record.write(config.volume.state_dir)


def _serve(volume: Volume, config: Config, mountpoint: Path, metrics: MetricsServer | None,
           bypass: Listening | None) -> None:
    if metrics is not None:
        metrics.watch(volume)
    timeouts = Timeouts(entry=config.fuse.entry_timeout, attr=config.fuse.attr_timeout)
    operations = AifsOperations(volume, timeouts, config.fuse.listing_attributes)
    pyfuse3.init(operations, str(mountpoint), mount_options(config))
    if volume.meta.kv.shared:
        volume.meta.kv.subscribe(invalidate_kernel, from_others=True)  # the kernel saw this node's own
    log.info("mounted %s at %s", config.volume.state_dir, mountpoint)
    try:
        trio.run(_run, volume, config, mountpoint, bypass)
    finally:
        pyfuse3.close(unmount=True)
        log.info("unmounted %s", mountpoint)


async def _run(volume: Volume, config: Config, mountpoint: Path, bypass: Listening | None) -> None:
    try:
        async with trio.open_nursery() as nursery:
            await volume.run_background(nursery)
            nursery.start_soon(_stop_on_signal, mountpoint, volume)
            control = ControlServer(volume.state_dir / SOCKET_NAME,
                                    {**Admin(volume).handlers(), **HintOps(volume).handlers()})
            await nursery.start(control.serve)
            if bypass is not None:
                await nursery.start(BypassServer(bypass, volume, mountpoint).serve)
            threading.Thread(target=_set_read_ahead, args=(mountpoint, config.fuse.read_ahead_kb),
                             name="aifs-read-ahead", daemon=True).start()
            # What start-up built (modules, the S3 client's service models) lives as long as
            # the mount: out of the collector's sight, full collections no longer walk it
            # and stall requests for tens of milliseconds.
            gc.freeze()
            await pyfuse3.main(max_tasks=config.fuse.max_tasks)
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await volume.close()


async def _stop_on_signal(mountpoint: Path, volume: Volume) -> None:
    """Pull the kernel's dirty pages in first (syncfs while still serving), then stop; requests
    waiting for a lock end, or the loop would wait for them."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("received %s, flushing and unmounting", signal.Signals(signum).name)
            # ctypes lets go of the GIL during syncfs (pyfuse3.syncfs does not), so this
            # loop can serve the writes the kernel sends while it flushes.
            await trio.to_thread.run_sync(sync_filesystem, mountpoint)
            volume.locks.stop()
            pyfuse3.terminate()
            return


def _set_read_ahead(mountpoint: Path, kib: int) -> None:
    """Let buffered reads arrive as 1 MiB requests instead of 128 KiB ones.

    The kernel sets the mount's read-ahead from the answer to FUSE INIT, which the
    loop sends once it serves requests, so a value written earlier is lost. A stat
    of the mountpoint returns only after INIT: made from a thread of its own (which
    never holds up an unmount), it is the signal.
    """
    if kib == 0:
        return
    try:
        os.stat(mountpoint)
    except OSError as e:
        log.warning("read-ahead left as it is: %s could not be reached: %s", mountpoint, e)
        return
    entry = aifs_mount(mountpoint)
    if entry is None:
        return
    knob = Path("/sys/class/bdi") / entry.device / "read_ahead_kb"
    try:
        knob.write_text(str(kib))
    except OSError as e:
        log.warning("could not set %s to %d: %s", knob, kib, e)
