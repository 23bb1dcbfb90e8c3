"""Volumes for the tests of reads without FUSE (aifs.client over a mount's data socket), and
readers in child processes: forked, as DataLoader workers are, some as an unprivileged user.

Blocks are small (64 KiB), so that files of many blocks cost little to write.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import TARGET, Volume  # tests/conftest.py
from helpers import LOCAL_TIERS

KiB = 1 << 10
BLOCK = 64 * KiB
NOBODY = 65534
CHILD_TIMEOUT_S = 60.0
CONFIG = """\
[volume]
state_dir = "{state_dir}"
block_size = "64KiB"

""" + LOCAL_TIERS + """
[[tiers]]
kind = "objstore"

[fuse]
{fuse}
"""

pytestmark = pytest.mark.skipif(TARGET == "local", reason="needs a real aifs mount")


class BypassVolume(Volume):
    """A volume of small blocks; `fuse` holds extra lines of its [fuse] table."""

    def __init__(self, base: Path, fuse: str = "") -> None:
        super().__init__(base)
        self.set_fuse(fuse)

    def set_fuse(self, fuse: str) -> None:
        self.config.write_text(CONFIG.format(state_dir=self.state_dir, fuse=fuse))


@pytest.fixture
def new_volume(tmp_path: Path) -> Iterator[Callable[..., BypassVolume]]:
    """Factory of unmounted volumes of this test's own, closed at teardown."""
    made: list[BypassVolume] = []

    def make(fuse: str = "") -> BypassVolume:
        made.append(BypassVolume(tmp_path / f"vol{len(made)}", fuse))
        return made[-1]

    yield make
    for volume in made:
        volume.close()


@pytest.fixture(scope="module")
def bvol(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BypassVolume]:
    """One mounted volume shared by a module's tests."""
    volume = BypassVolume(tmp_path_factory.mktemp("bypass"))
    volume.mount()
    yield volume
    volume.close()


def _child(target: Callable[..., Any], args: tuple, user: int | None, results: Any) -> None:
    try:
        if user is not None:
            os.setgroups([])
            os.setgid(user)
            os.setuid(user)
        results.put(("ok", target(*args)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which fails the test
        results.put(("error", repr(e)))


def in_children(target: Callable[..., Any], args_list: list[tuple], user: int | None = None) -> list[Any]:
    """`target(*args)` in one forked child per entry of `args_list` (as `user` when given), all at
    once; what each returned, in no particular order. A child that fails or hangs fails the test."""
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    children = [context.Process(target=_child, args=(target, args, user, results)) for args in args_list]
    for child in children:
        child.start()
    try:
        outcomes = [results.get(timeout=CHILD_TIMEOUT_S) for _ in children]
    finally:
        for child in children:
            child.join(timeout=5)
            if child.is_alive():
                child.kill()
    errors = [detail for status, detail in outcomes if status == "error"]
    assert not errors, f"{len(errors)} child process(es) failed: {errors[:3]}"
    return [detail for _, detail in outcomes]


def as_user(user: int, target: Callable[..., Any], *args: Any) -> Any:
    """`target(*args)` in a forked child running as `user` (no supplementary groups)."""
    return in_children(target, [args], user)[0]


def through_mount(paths: list[Path | str]) -> list[bytes | str]:
    """What plain reads through the mount give: the bytes, or the name of the error."""
    found: list[bytes | str] = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                found.append(f.read())
        except OSError as e:
            found.append(type(e).__name__)
    return found


def shared_memory_held() -> dict[int, str]:
    """The memfds this process holds descriptors of: their names by descriptor."""
    held = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the listing's own descriptor, closed by now
            continue
        if target.startswith("/memfd:"):
            held[int(fd)] = target.removeprefix("/memfd:").removesuffix(" (deleted)")
    return held


def shared_memory_since(before: dict[int, str]) -> list[str]:
    """The names of the memfds this process came to hold since `before`, sorted."""
    return sorted(name for fd, name in shared_memory_held().items() if before.get(fd) != name)
