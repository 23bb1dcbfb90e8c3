"""Reading /proc/self/mountinfo: is a path an aifs mount, and of which state directory."""

import os
from dataclasses import dataclass
from pathlib import Path

FSTYPE = "fuse.aifs"
SOURCE_PREFIX = "aifs:"


@dataclass(frozen=True)
class MountEntry:
    mountpoint: Path
    fstype: str
    source: str
    device: str
    owner_uid: int | None = None  # FUSE mounts: the user who mounted it (user_id=)

    @property
    def state_dir(self) -> Path | None:
        if self.source.startswith(SOURCE_PREFIX):
            return Path(self.source[len(SOURCE_PREFIX):])
        return None


def _unescape(field: str) -> str:
    return field.encode().decode("unicode_escape").encode("latin-1").decode()


def _parse(line: str) -> MountEntry:
    left, right = line.split(" - ", 1)
    fields = left.split()
    fstype, source, options = (right.split() + [""])[:3]
    return MountEntry(Path(_unescape(fields[4])), fstype, _unescape(source), fields[2], _owner(options))


def _owner(options: str) -> int | None:
    for option in options.split(","):
        if option.startswith("user_id=") and option[8:].isdigit():
            return int(option[8:])
    return None


def mounts() -> list[MountEntry]:
    with open("/proc/self/mountinfo") as f:
        return [_parse(line) for line in f]


def mount_holding(path: str) -> MountEntry | None:
    """The mount an absolute, resolved path is on: the deepest mountpoint at or above it and,
    of mounts stacked there, the last, which hides those below it."""
    best = None
    for entry in mounts():
        point = str(entry.mountpoint)
        if path == point or path.startswith(point.rstrip("/") + "/"):
            if best is None or len(point) >= len(str(best.mountpoint)):
                best = entry
    return best


def find_mount(mountpoint: Path) -> MountEntry | None:
    """The topmost mount at `mountpoint`, or None."""
    target = Path(os.path.abspath(mountpoint))
    found = None
    for entry in mounts():
        if entry.mountpoint == target:
            found = entry
    return found


def aifs_mount(mountpoint: Path) -> MountEntry | None:
    entry = find_mount(mountpoint)
    return entry if entry is not None and entry.fstype == FSTYPE else None
