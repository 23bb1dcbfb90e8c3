"""One push job: transform files where their blocks are, write the results as new files.

The client asks the mount where each source file's blocks are (the `push_plan` control
operation), sends each block's piece of work to a block server that holds it (a flash
server with a whole copy, or another node of a shared volume), and transforms itself what
no server can or need: blocks this node holds itself, blocks on no server (only in S3,
erasure-coded shards, holes), on a server that refuses the transform, or on one that dies
mid-run. Pieces run concurrently and are joined in file order (aifs.push.records), so
the output is byte for byte the transform of the whole file on the client.

Each result is written through the mount to a hidden temporary file beside its destination
and renamed into place only once complete: a job that fails leaves no partial output
under a destination's name (the temporary file is removed, or, if the client itself is
killed, left under its hidden name).
"""

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from aifs.control.client import ControlClient, ControlError, mount_of
from aifs.push.pieces import Piece, file_pieces
from aifs.push.records import Stitcher
from aifs.push.servers import PieceAnswer, PushServers, Reach
from aifs.push.serving import piece_answer
from aifs.push.targets import Target, targets
from aifs.push.transforms import Transform
from aifs.rdma.auth import Secret, SecretFileError

T = TypeVar("T")
R = TypeVar("R")
DEFAULT_TIMEOUT = 60.0  # one piece's request: a server transforms a whole block meanwhile
WORKERS = 8
CONTROL_TIMEOUT = 60.0
PLAN_BATCH = 512  # files per push_plan request: each is served on the mount's event loop


class PushError(Exception):
    """The job could not run or finish; the message says why. No partial output is left."""


@dataclass
class PushReport:
    files: int = 0
    bytes_in: int = 0        # source bytes
    on_servers: int = 0      # of them, transformed where they are
    on_client: int = 0       # of them, read through the mount and transformed here
    moved: int = 0           # bytes of the job's requests to the block servers and their answers
    bytes_out: int = 0
    total: int = 0           # source bytes of the whole job
    outputs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


Progress = Callable[[PushReport], None]


def run(transform: Transform, sources: Iterable[str | os.PathLike], out: str | os.PathLike, *,
        timeout: float = DEFAULT_TIMEOUT, workers: int = WORKERS, progress: Progress | None = None,
        note: Callable[[str], None] | None = None) -> PushReport:
    """Transform every file under `sources` into the directory `out`; raises PushError.
    `progress` is called with the report as pieces finish, `note` with each fallback's reason."""
    report = PushReport()
    found = targets([Path(s) for s in sources], Path(out))
    plan = _plan(found)
    report.total = sum(entry["size"] for entry in plan["files"])

    def noted(line: str) -> None:
        report.notes.append(line)
        if note is not None:
            note(line)

    for line in plan["notes"]:
        noted(line)
    servers = _servers(plan, transform, timeout, noted)
    job = _Job(transform, servers, report, progress or (lambda _: None))
    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="aifs-push") as pool:
            for target, entry in zip(found, plan["files"]):
                job.file(pool, 2 * workers, target, file_pieces(entry, plan["block_size"]))
    finally:
        if servers is not None:
            report.moved = servers.moved
            servers.close()
    return report


def _plan(found: list[Target]) -> dict[str, Any]:
    """The mount's plan for every source file, once their open writes are flushed."""
    state_dirs = {mount_of(directory).state_dir for directory in {target.source.parent for target in found}}
    if len(state_dirs) != 1:
        raise PushError("the sources are on several aifs mounts; push the files of each mount in a job of its own")
    control = ControlClient(state_dirs.pop(), CONTROL_TIMEOUT)
    inodes = [target.source.stat().st_ino for target in found]
    try:
        control.call("sync", inodes=inodes)
        batches = [control.call("push_plan", inodes=inodes[i:i + PLAN_BATCH])
                   for i in range(0, len(inodes), PLAN_BATCH)]
    except ControlError as e:
        raise PushError(str(e)) from None
    return {"block_size": batches[0]["block_size"],
            "servers": {name: server for batch in batches for name, server in batch["servers"].items()},
            "notes": list(dict.fromkeys(line for batch in batches for line in batch["notes"])),
            "files": [entry for batch in batches for entry in batch["files"]]}


def _servers(plan: dict[str, Any], transform: Transform, timeout: float,
             note: Callable[[str], None]) -> PushServers | None:
    """The job's block servers, each with the secret that reaches it; None when there are none."""
    if not plan["servers"]:
        note("no flash server or other node holds these files' blocks: every piece is transformed here")
        return None
    kinds = {server["secret_file"]: server["kind"] for server in plan["servers"].values()}
    secrets = {path: _secret(path, kind, note) for path, kind in kinds.items()}
    reach = {name: Reach(server["kind"], secret) for name, server in plan["servers"].items()
             if (secret := secrets[server["secret_file"]]) is not None}
    return PushServers(reach, timeout, transform, note) if reach else None


def _secret(path: str, kind: str, note: Callable[[str], None]) -> Secret | None:
    try:
        return Secret.from_file(Path(path))
    except SecretFileError as e:
        note(f"cannot reach the {kind}s ({e}): their pieces are transformed here")
        return None


class _Job:
    def __init__(self, transform: Transform, servers: PushServers | None, report: PushReport,
                 progress: Progress) -> None:
        self.transform = transform
        self.servers = servers
        self.report = report
        self.progress = progress

    def file(self, pool: ThreadPoolExecutor, window: int, target: Target, pieces: list[Piece]) -> None:
        """Transform one file into a temporary file, renamed to the target once complete; at
        most `window` pieces are in flight or waiting to be written."""
        temporary = target.output.with_name(f".{target.output.name}.push-{os.getpid()}.tmp")
        target.output.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(target.source, "rb") as source, open(temporary, "wb") as sink:
                stitcher = Stitcher(self.transform)
                work = partial(self._piece, source.fileno())
                for piece, (answer, on_server) in _in_order(pool, pieces, work, window):
                    sink.write(stitcher.add(answer.head, answer.result, answer.tail, answer.whole))
                    self._done(piece, on_server)
                sink.write(stitcher.finish())
            os.replace(temporary, target.output)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        self.report.files += 1
        self.report.bytes_out += target.output.stat().st_size
        self.report.outputs.append(str(target.output))

    def _piece(self, fd: int, piece: Piece) -> tuple[PieceAnswer, bool]:
        """The piece's answer, and whether a server gave it."""
        answer = self.servers.answer(piece) if self.servers is not None and piece.places else None
        if answer is not None:
            return answer, True
        return PieceAnswer(*piece_answer(self.transform, _read(fd, piece))), False

    def _done(self, piece: Piece, on_server: bool) -> None:
        self.report.bytes_in += piece.length
        if on_server:
            self.report.on_servers += piece.length
        else:
            self.report.on_client += piece.length
        if self.servers is not None:
            self.report.moved = self.servers.moved
        self.progress(self.report)


def _read(fd: int, piece: Piece) -> bytes:
    """The piece's bytes, read through the mount."""
    data = os.pread(fd, piece.length, piece.file_offset)
    while len(data) < piece.length:
        more = os.pread(fd, piece.length - len(data), piece.file_offset + len(data))
        if not more:
            raise PushError(f"the file ended {piece.length - len(data)} bytes early: was it changed meanwhile?")
        data += more
    return data


def _in_order(pool: ThreadPoolExecutor, items: list[T], work: Callable[[T], R], window: int) -> Iterator[tuple[T, R]]:
    """`work` over the items on the pool, at most `window` ahead, the results in the items' order."""
    pending: deque[tuple[T, Future[R]]] = deque()
    try:
        for item in items:
            pending.append((item, pool.submit(work, item)))
            if len(pending) >= window:
                done, future = pending.popleft()
                yield done, future.result()
        while pending:
            done, future = pending.popleft()
            yield done, future.result()
    finally:
        for _, future in pending:
            future.cancel()
