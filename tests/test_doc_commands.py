"""Docs whose commands are tested.

A fenced block in README.md or docs/*.md whose info string is ``sh test`` or ``bash test``
(GitHub shows only the language) is run here, so that the commands the docs show cannot
drift from the CLI.
Mark every block that can run on a test machine; leave unmarked the blocks that need what
a test cannot provide (a production host's Redis, kubectl, systemd, AWS, an RDMA device)
and README's install commands, which install system-wide and which CI runs itself. The
marked blocks of one file run in order, in one scratch environment, each in bash with
``set -euo pipefail``: ``aifs`` is this checkout, HOME is a scratch directory (so the
embedded default config keeps its volume there), the working directory starts empty, the
paths in SUBSTITUTIONS stand for scratch paths, and the configs in CONFIGS are written
there first. Whatever the blocks mounted is unmounted after the file's last block, also
when a block failed.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import LOCAL_TIERS

from aifs.fuse.mountinfo import find_mount, mounts
from aifs.vfs.statedir import read_holder

REPO = Path(__file__).resolve().parents[1]
DOCS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
SHELLS = ("sh", "bash")
MARKER = "test"
NOT_TO_RUN = ("install.sh",)  # installs system-wide; CI runs it
BLOCK_TIMEOUT_S = 120
UMOUNT_TIMEOUT_S = 60
DAEMON_EXIT_TIMEOUT_S = 30

# What the docs write -> where it is in a scratch environment, relative to its root.
SUBSTITUTIONS = {
    "/mnt/": "mnt/",
    "/etc/aifs/": "etc/aifs/",
}

# Configs the docs name, written into each scratch environment: small local volumes that
# share one object store directory, so a volume moved from one engine to the other finds
# its data.
CONFIG_TEMPLATE = """\
[volume]
state_dir = "{root}/state/{name}"

[meta]
shards = {shards}

""" + LOCAL_TIERS + """
[[tiers]]
kind = "objstore"
path = "{root}/objects"
"""
CONFIGS = {
    "etc/aifs/train.toml": {"name": "train", "shards": 8},
    "etc/aifs/new.toml": {"name": "new", "shards": 4},
}

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass(frozen=True)
class Fence:
    """One fenced block of a doc: where it opens (1-based line), its info string, its text."""

    doc: Path
    line: int
    info: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"

    @property
    def marked(self) -> bool:
        words = self.info.split()
        return len(words) == 2 and words[0] in SHELLS and words[1] == MARKER

    def numbered(self) -> str:
        """The block as the doc has it, each line with its line number in the doc."""
        return "\n".join(f"{self.line + i:>5} | {text}" for i, text in enumerate(self.text.splitlines(), 1))


def fences(doc: Path) -> Iterator[Fence]:
    """The fenced blocks of a Markdown file (also those indented inside list items)."""
    lines = doc.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = FENCE.match(lines[j])
            if closing and closing["fence"].startswith(fence) and not closing["info"].strip():
                break
            body.append(_dedent(lines[j], indent))
            j += 1
        yield Fence(doc, i + 1, opening["info"].strip(), "\n".join(body) + "\n")
        i = j + 1


def _dedent(line: str, indent: int) -> str:
    strip = len(line) - len(line.lstrip(" "))
    return line[min(strip, indent):]


def marked_blocks() -> list[Fence]:
    return [f for doc in DOCS for f in fences(doc) if f.marked]


BLOCKS = marked_blocks()
LAST_OF_DOC = {block.doc: block for block in BLOCKS}


def substitute(text: str, root: Path) -> str:
    """The doc's placeholder paths, where they start a path, replaced by scratch paths."""
    pattern = "|".join(re.escape(p) for p in SUBSTITUTIONS)
    return re.sub(rf"(?<![\w./-])({pattern})", lambda m: f"{root}/{SUBSTITUTIONS[m[1]]}", text)


class Scratch:
    """The environment the blocks of one doc run in, under its own root directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.failed: str | None = None  # the block that failed, after which the rest cannot run
        self.work = root / "work"
        for sub in ("bin", "home", "work", "mnt", "etc/aifs", "objects"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        self.aifs = root / "bin" / "aifs"
        self.aifs.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m aifs \"$@\"\n")
        self.aifs.chmod(0o755)
        for path, fields in CONFIGS.items():
            (root / path).write_text(CONFIG_TEMPLATE.format(root=root, **fields))
        self.env = {
            "PATH": f"{root / 'bin'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(root / "home"),
            "PYTHONPATH": str(REPO),
            "LANG": "C.UTF-8",
            "PS4": "+ ",
        }

    def run(self, block: Fence) -> tuple[int | None, str]:
        """Run the block in bash; its exit status (None when it timed out) and its output,
        with each command it ran (xtrace) before what that command printed."""
        script = "set -euo pipefail -x\n" + substitute(block.text, self.root)
        proc = subprocess.Popen(["bash", "-c", script], cwd=self.work, env=self.env, text=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=BLOCK_TIMEOUT_S)
            return proc.returncode, output
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):  # it may have ended meanwhile
                os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            return None, output + f"\n(killed after {BLOCK_TIMEOUT_S} s)"

    def close(self) -> None:
        """Unmount every mount under the root: `aifs umount`, else a lazy unmount and an end
        to the mount process."""
        for entry in reversed(mounts()):
            if entry.mountpoint.is_relative_to(self.root):
                self._unmount(entry.mountpoint, entry.state_dir)
        left = [str(m.mountpoint) for m in mounts() if m.mountpoint.is_relative_to(self.root)]
        assert not left, f"still mounted after cleanup: {left}"

    def _unmount(self, mountpoint: Path, state_dir: Path | None) -> None:
        holder = read_holder(state_dir) if state_dir is not None else None
        try:
            subprocess.run([str(self.aifs), "umount", str(mountpoint)], env=self.env,
                           capture_output=True, timeout=UMOUNT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
        if find_mount(mountpoint) is not None:
            subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], capture_output=True)
        if holder is not None and holder.pid is not None:
            _end_mount_process(holder.pid, mountpoint)


def _end_mount_process(pid: int, mountpoint: Path) -> None:
    """Wait for the mount process of `mountpoint` to exit, and kill it if it does not: only
    that process, recognised by its command line."""
    deadline = time.monotonic() + DAEMON_EXIT_TIMEOUT_S
    while _is_mount_process(pid, mountpoint):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            return
        time.sleep(0.1)


def _is_mount_process(pid: int, mountpoint: Path) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    return "aifs" in argv and "mount" in argv and str(mountpoint) in argv


class Scratches:
    """One Scratch per doc, made when its first block runs."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.tmp_path_factory = tmp_path_factory
        self.open: dict[Path, Scratch] = {}

    def for_doc(self, doc: Path) -> Scratch:
        if doc not in self.open:
            root = self.tmp_path_factory.mktemp(doc.stem).resolve()  # as mountinfo names it
            self.open[doc] = Scratch(root)
        return self.open[doc]

    def close(self, doc: Path) -> None:
        scratch = self.open.pop(doc, None)
        if scratch is not None:
            scratch.close()

    def close_all(self) -> None:
        for doc in list(self.open):
            self.close(doc)


@pytest.fixture(scope="module")
def scratches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scratches]:
    made = Scratches(tmp_path_factory)
    try:
        yield made
    finally:
        made.close_all()


def test_markers_are_well_formed() -> None:
    """A misspelt marker would leave a block silently untested; README's install commands
    must never run here."""
    wrong = [f"{f.where}: ```{f.info}" for doc in DOCS for f in fences(doc)
             if len(f.info.split()) > 1 and not f.marked]
    assert not wrong, f"fence info strings are a language, or a shell and {MARKER!r}:\n" + "\n".join(wrong)
    forbidden = [b.where for b in BLOCKS if any(name in b.text for name in NOT_TO_RUN)]
    assert not forbidden, f"blocks that install system-wide are marked to run: {forbidden}"
    assert BLOCKS, "no doc block is marked to run"


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.where)
def test_doc_block(block: Fence, scratches: Scratches) -> None:
    scratch = scratches.for_doc(block.doc)
    try:
        if scratch.failed:
            pytest.skip(f"{scratch.failed} failed before it, in the same environment")
        status, output = scratch.run(block)
        if status != 0:
            scratch.failed = block.where
            pytest.fail(_failure(block, scratch, status, output), pytrace=False)
    finally:
        if LAST_OF_DOC[block.doc] is block:
            scratches.close(block.doc)


def _failure(block: Fence, scratch: Scratch, status: int | None, output: str) -> str:
    ended = f"did not finish within {BLOCK_TIMEOUT_S} s" if status is None else f"exited with status {status}"
    placeholders = " and ".join(SUBSTITUTIONS)
    return (f"{block.where}: the block {ended}\n"
            f"--- the block (run with {placeholders} under {scratch.root}) ---\n{block.numbered()}\n"
            f"--- its output ---\n{output[-6000:]}")
