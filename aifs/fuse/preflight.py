"""What must hold before a mount creates anything: the FUSE device can be opened.

Checked first, so that a user who cannot mount (no /dev/fuse, no permission on it) gets
a sentence, and no new, empty volume is left behind by the attempt.
"""

import errno
import os

FUSE_DEVICE = "/dev/fuse"


class MountRefused(Exception):
    """The mount cannot start; the message says why and what to do."""


def check_fuse_device(device: str = FUSE_DEVICE) -> None:
    try:
        os.close(os.open(device, os.O_RDWR))
    except FileNotFoundError:
        raise MountRefused(f"{device} does not exist: load the fuse kernel module (modprobe fuse), "
                           "or give the container the device (--device /dev/fuse)") from None
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM):
            raise MountRefused(f"cannot open {device}: permission denied; mount as root, or as a "
                               f"user with read and write access to {device}") from None
        raise MountRefused(f"cannot open {device}: {e.strerror}") from None
