"""Telling systemd that a service is ready (sd_notify), for units of Type=notify.

systemd passes the address of its notification socket in NOTIFY_SOCKET; outside systemd the
variable is unset and nothing is sent. The protocol is one datagram of text, so the standard
library is enough.
"""

import os
import socket
import threading
import time
from pathlib import Path

from aifs.fuse.mountinfo import aifs_mount

POLL_S = 0.05


def notify(state: str) -> None:
    """Send `state` (e.g. "READY=1") to systemd when it asked for notifications."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if not address:
        return
    if address.startswith("@"):  # an abstract socket
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        sock.sendto(state.encode(), address)


def notify_ready_when_mounted(mountpoint: Path) -> None:
    """Say READY=1 once the mount at `mountpoint` answers, the moment `aifs mount -d` would
    return: units ordered after the mount then find it serving. From a thread of its own,
    as the mount process serves requests on its main thread."""
    if os.environ.get("NOTIFY_SOCKET"):
        threading.Thread(target=_notify_once_mounted, args=(mountpoint,), name="aifs-sd-notify",
                         daemon=True).start()


def _notify_once_mounted(mountpoint: Path) -> None:
    while aifs_mount(mountpoint) is None:  # the process exits (ending this thread) if it cannot mount
        time.sleep(POLL_S)
    try:
        os.stat(mountpoint)  # answered only once the kernel's FUSE INIT was
    except OSError:
        return  # the mount broke while starting: the process ends, and systemd sees that
    notify("READY=1")
