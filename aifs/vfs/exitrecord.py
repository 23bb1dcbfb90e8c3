"""What a mount process leaves behind when it ends: whether its unmount finished, and what it
left waiting for the durable tier.

`aifs umount` is not the mount process's parent, so it cannot see its exit status; it reads
this record instead, and reports success only when the record says the unmount finished.
The record is written as "not finished" when the mount starts, so a process that dies on
the way out is never taken for one that finished. It is rewritten in place, within room
taken when it was first written, so that a full state directory cannot keep the last
word from being written; a record torn by a crash does not parse, which reads as "not
finished" too.
"""

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

RECORD_NAME = "last-exit.json"
RECORD_BYTES = 4096  # the room it keeps: a record is a few hundred bytes, its error message cut to fit


@dataclass
class ExitRecord:
    pid: int
    finished: bool = False
    error: str = ""
    pending_blocks: int = 0
    pending_bytes: int = 0
    durable_tier: str = ""

    def write(self, state_dir: Path) -> None:
        """Write the record over the old one, padded to RECORD_BYTES (a reader strips the padding)."""
        self.error = self.error[:RECORD_BYTES // 8]  # even escaped in full, it fits
        text = json.dumps(asdict(self)).encode().ljust(RECORD_BYTES)
        fd = os.open(state_dir / RECORD_NAME, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.pwrite(fd, text, 0)
        finally:
            os.close(fd)

    @classmethod
    def read(cls, state_dir: Path, pid: int) -> "ExitRecord | None":
        """The record of process `pid`, or None when it left none (or another process's is there)."""
        try:
            record = cls(**json.loads((state_dir / RECORD_NAME).read_text()))
        except (OSError, ValueError, TypeError):
            return None
        return record if record.pid == pid else None
