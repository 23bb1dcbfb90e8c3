"""What the machine offers, for tiers whose capacity is "auto"."""

from pathlib import Path
from shutil import disk_usage

MEMINFO = Path("/proc/meminfo")


def mem_available() -> int:
    """Bytes the kernel can hand out without swapping (MemAvailable), the honest RAM budget."""
    return _meminfo("MemAvailable")


def mem_total() -> int:
    """All the memory the kernel manages (MemTotal)."""
    return _meminfo("MemTotal")


def _meminfo(field: str) -> int:
    for line in MEMINFO.read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise OSError(f"{MEMINFO} has no {field} line")


def fs_free(path: Path) -> int:
    """Free bytes of the filesystem that holds, or will hold, `path`."""
    return disk_usage(_existing_ancestor(path)).free


def fs_total(path: Path) -> int:
    """Total bytes of the filesystem that holds, or will hold, `path`."""
    return disk_usage(_existing_ancestor(path)).total


def _existing_ancestor(path: Path) -> Path:
    """Tier directories are created at mount time, so measure the nearest folder that exists."""
    return next(p for p in (path, *path.parents) if p.exists())
