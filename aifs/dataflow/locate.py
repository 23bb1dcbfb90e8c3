"""Where the bytes of files on aifs mounts are, by node: what a scheduler or a sampler needs
to bring work to the data. Plain Python (no torch); each path's mount is asked over its
control channel (the `locate` operation, aifs.vfs.locate).

    from aifs.dataflow.locate import locate
    for where in locate(["/mnt/aifs/train/shard-0001.tar", "/mnt/aifs/train/val"]):
        print(where.path, where.bytes, where.nodes)   # {'gpu-07': 1073741824, 'gpu-12': 0}

A tree counts every regular file under it. The files of one mount are asked about in
batches, each bounded in time on the mount; a node that did not answer one batch is not
asked again by this call, and is listed in `unknown` (with the reason) rather than counted.
Raises aifs.control.client.ControlError for a path on no aifs mount, or a mount that does not
answer, and OSError for a path that cannot be read.
"""

import os
import stat
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from aifs.batches import batches
from aifs.cli.treewalk import TreeWalk
from aifs.control.client import ControlClient, mount_of

CALL_TIMEOUT_S = 60.0
BATCH_FILES = 512
BATCH_BYTES = 1 << 30  # the blocks of one batch are asked of every node within the mount's wait
FLASH_SERVERS = "flash servers"  # the place the mount names so, among the unknown ones

AnyPath = str | os.PathLike


@dataclass
class Location:
    """Bytes of `path` (a file, or every file under a directory) by place. `node` is this
    node: the one whose mount answered; `ram` and `nvme` are its tiers'. `nodes` has the
    bytes each node holds in its RAM or NVMe, this one included, for every node whose
    holdings are known; `unknown` names the places (nodes, or "flash servers") that could
    not say, with why. `flash` is None without a flash tier or when it did not answer.
    `durable` is what the durable tier (`durable_tier`) holds: everything not waiting for
    upload."""

    path: str
    node: str = ""
    files: int = 0
    bytes: int = 0
    ram: int = 0
    nvme: int = 0
    nodes: dict[str, int] = field(default_factory=dict)
    flash: int | None = None
    durable: int = 0
    durable_tier: str = ""
    unknown: dict[str, str] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)  # "path: reason" of entries the walk could not read

    def add(self, report: dict) -> None:
        """One file's report from the mount."""
        self.files += 1
        for place in ("bytes", "ram", "nvme", "durable"):
            setattr(self, place, getattr(self, place) + report[place])
        for name, held in report["nodes"].items():
            self.nodes[name] = self.nodes.get(name, 0) + held
        if "flash" in report:
            self.flash = (self.flash or 0) + report["flash"]

    def as_json(self) -> dict:
        return asdict(self)


@dataclass
class _File:
    ino: int
    size: int
    owner: int  # index of the path it was found under


class _Mounts:
    """The mounts the paths are on, each asked once, when first met, which node it is: so a
    mount that is not running says so before any path on it is read. The files of one
    directory are on one mount, which is looked up once for all of them."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.files: dict[Path, list[_File]] = defaultdict(list)  # state directory: the files of its mount
        self.paths: dict[Path, list[int]] = defaultdict(list)  # state directory: the paths on its mount
        self.identity: dict[Path, dict] = {}  # state directory: its mount's answer about no files
        self._of_directory: dict[str, Path] = {}

    def client(self, state_dir: Path) -> ControlClient:
        return ControlClient(state_dir, self.timeout)

    def of(self, path: Path) -> Path:
        return self._met(_state_dir(path))

    def of_directory(self, directory: str) -> Path:
        if directory not in self._of_directory:
            self._of_directory[directory] = self.of(Path(directory))
        return self._of_directory[directory]

    def _met(self, state_dir: Path) -> Path:
        if state_dir not in self.identity:
            self.identity[state_dir] = self.client(state_dir).call("locate", inodes=[])
        return state_dir


def locate(paths: Iterable[AnyPath], timeout: float = CALL_TIMEOUT_S) -> list[Location]:
    """A Location for each path, in order."""
    found: list[Location] = []
    mounts = _Mounts(timeout)
    for index, path in enumerate(paths):
        found.append(Location(os.fspath(path)))
        found[index].unreadable = _walk(Path(path), index, mounts)
    for state_dir, indices in mounts.paths.items():
        identity = mounts.identity[state_dir]
        _ask_mount(mounts.client(state_dir), mounts.files[state_dir], found)
        for index in indices:
            found[index].node, found[index].durable_tier = identity["node"], identity["durable_tier"]
    for where in found:
        for name in where.unknown:
            where.nodes.pop(name, None)  # counted in part at most: not a figure to act on
        if FLASH_SERVERS in where.unknown:
            where.flash = None
    return found


def node_of(path: AnyPath, timeout: float = CALL_TIMEOUT_S) -> str:
    """The name of the node whose mount holds `path`: this node, as the volume's nodes call it."""
    mounts = _Mounts(timeout)
    return mounts.identity[mounts.of(Path(path))]["node"]


def _state_dir(path: Path) -> Path:
    state_dir = mount_of(path).state_dir
    assert state_dir is not None  # an aifs mount's source always names it
    return state_dir


def _walk(path: Path, owner: int, mounts: _Mounts) -> list[str]:
    """Note the regular files at or below `path` on their mount; the entries that could not be read."""
    try:
        st = path.stat()
    except OSError:
        mounts.of(path)  # a path on a mount that is not running: the mount's error says so
        raise
    if not stat.S_ISDIR(st.st_mode):
        state_dir = mounts.of_directory(os.path.dirname(os.path.abspath(path)))
        mounts.paths[state_dir].append(owner)
        if stat.S_ISREG(st.st_mode):
            mounts.files[state_dir].append(_File(st.st_ino, st.st_size, owner))
        return []
    state_dir = mounts.of(path)
    mounts.paths[state_dir].append(owner)
    walk = TreeWalk(path)
    mounts.files[state_dir] += [_File(ino, size, owner) for ino, size in walk]
    return walk.unreadable


def _ask_mount(client: ControlClient, files: list[_File], found: list[Location]) -> None:
    """Ask one mount about its files, batch by batch; a node silent once is not asked again."""
    skip: set[str] = set()
    for batch in batches(files, lambda f: f.size, BATCH_FILES, BATCH_BYTES):
        answer = client.call("locate", inodes=sorted({f.ino for f in batch}), skip=sorted(skip))
        reports = {report["ino"]: report for report in answer["files"]}
        skip |= set(answer["unknown"]) - {FLASH_SERVERS}
        for index in {f.owner for f in batch}:
            for place, why in answer["unknown"].items():
                found[index].unknown.setdefault(place, why)  # why it was first silent, not that it was skipped
        for f in batch:
            found[f.owner].add(reports[f.ino])
