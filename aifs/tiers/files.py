"""Reading and writing whole objects as files; shared by the NVMe tier and the local object store."""

import os
from pathlib import Path


def read_file(path: Path) -> bytes | None:
    try:
        with open(path, "rb", buffering=0) as f:
            return f.read()
    except FileNotFoundError:
        return None


def write_file(path: Path, data: bytes, durable: bool) -> None:
    """Write an object; `durable` makes it survive power loss before returning (file and name)."""
    tmp = path.with_name(path.name + ".tmp") if durable else path
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    if durable:
        os.replace(tmp, path)
        sync_dir(path.parent)


def sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_file(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_file(path: Path) -> int:
    """Delete an object file; returns the bytes it held (0 when it was not there)."""
    try:
        size = path.stat().st_size
        path.unlink()
    except FileNotFoundError:
        return 0
    return size


def make_fanout(root: Path) -> None:
    for i in range(256):
        (root / f"{i:02x}").mkdir(parents=True, exist_ok=True)
