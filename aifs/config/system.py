"""What the machine offers, for tiers whose capacity is "auto"."""

from pathlib import Path
from shutil import disk_usage

MEMINFO = Path("/proc/meminfo")


def mem_available() -> int:
    """Bytes the kernel can hand out without swapping (MemAvailable), the honest RAM budget."""
    for line in MEMINFO.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise OSError(f"{MEMINFO} has no MemAvailable line")


def fs_free(path: Path) -> int:
    """Free bytes of the filesystem that holds, or will hold, `path`."""
    return disk_usage(_existing_ancestor(path)).free


def fs_total(path: Path) -> int:
    """Total bytes of the filesystem that holds, or will hold, `path`."""
    return disk_usage(_existing_ancestor(path)).total


def _existing_ancestor(path: Path) -> Path:
    """Tier directories are created at mount time, so measure the nearest folder that exists."""
    return next(p for p in (path, *path.parents) if p.exists())
