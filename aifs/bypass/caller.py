"""Who asks on the data socket, and what the kernel's default_permissions would let them do.

The identity is the peer's credentials at connect time (SO_PEERCRED), with the supplementary
groups read from /proc/PID/status; should that pid have changed hands meanwhile (its ids no longer
match), the caller gets no supplementary groups: less access, never more.
"""

import os
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

PEERCRED = struct.Struct("3i")  # pid, uid, gid
MAY_READ, MAY_SEARCH = 4, 1  # the rwx bit each asks for


def allows(mode: int, owner: int, group: int, uid: int, groups: frozenset[int], want: int) -> bool:
    """The mode-bit check of generic_permission: the owner's bits for the owner, the group's for
    a member, the others' for everyone else; root may read and search anything."""
    if uid == 0:
        return True
    if uid == owner:
        bits = mode >> 6
    elif group in groups:
        bits = mode >> 3
    else:
        bits = mode
    return bits & want == want


@dataclass(frozen=True)
class Caller:
    pid: int
    uid: int
    groups: frozenset[int]  # the primary group too

    @classmethod
    def of(cls, sock: socket.socket) -> "Caller":
        pid, uid, gid = PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, PEERCRED.size))
        return cls(pid, uid, frozenset((gid, *_supplementary_groups(pid, uid, gid))))

    @property
    def is_root(self) -> bool:
        return self.uid == 0

    def may(self, mode: int, owner: int, group: int, want: int) -> bool:
        return allows(mode, owner, group, self.uid, self.groups, want)

    def reaches(self, mountpoint: Path) -> bool:
        """Whether the directories above the mountpoint (outside the volume) let the caller
        search them, by their mode bits."""
        for directory in mountpoint.parents:
            try:
                info = os.stat(directory)
            except OSError:
                return False
            if not stat.S_ISDIR(info.st_mode) or not self.may(info.st_mode, info.st_uid, info.st_gid, MAY_SEARCH):
                return False
        return True


def _supplementary_groups(pid: int, uid: int, gid: int) -> tuple[int, ...]:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return ()
    fields = {name: value.split() for name, _, value in (line.partition(":") for line in lines)}
    effective_uid, effective_gid = fields.get("Uid", [])[1:2], fields.get("Gid", [])[1:2]
    if effective_uid != [str(uid)] or effective_gid != [str(gid)]:
        return ()
    return tuple(int(group) for group in fields.get("Groups", []))
