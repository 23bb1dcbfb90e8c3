"""What fsck found: one Finding per problem, printed one per line, and the closing summary."""

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aifs.meta import keys

Repair = Callable[[], None]


@dataclass
class Finding:
    """One problem: what is wrong with which keys, inode or block, and what --repair does about it.

    `fix` says in words what the repair does (None: nothing can); `action` does it as one
    atomic metadata batch (or one object deletion), so an interrupted repair is safe to rerun.
    """

    kind: str
    subject: str
    meaning: str
    fix: str | None = None
    action: Repair | None = field(default=None, repr=False, compare=False)
    ino: int | None = None
    block: int | None = None
    repaired: bool = False
    note: str = ""

    def line(self) -> str:
        return f"{self.kind}: {self.subject}: {self.meaning} [{self._status()}]"

    def _status(self) -> str:
        if self.repaired:
            return f"repaired: {self.fix}"
        if self.fix is None:
            return "cannot be repaired"
        return f"{self.note}; --repair would {self.fix}" if self.note else f"--repair will {self.fix}"

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "subject": self.subject, "meaning": self.meaning, "fix": self.fix,
            "ino": self.ino, "block": self.block, "repaired": self.repaired, "note": self.note or None,
        }


@dataclass
class Summary:
    """Counts of what was found and repaired; the exit status follows from what remains."""

    state_dir: str
    found: Counter[str] = field(default_factory=Counter)
    repaired: Counter[str] = field(default_factory=Counter)
    checked: dict[str, int] = field(default_factory=dict)

    def add(self, finding: Finding) -> None:
        self.found[finding.kind] += 1
        if finding.repaired:
            self.repaired[finding.kind] += 1

    @property
    def remaining(self) -> Counter[str]:
        return self.found - self.repaired

    @property
    def exit_code(self) -> int:
        """0: clean, or everything found was repaired; 1: problems remain."""
        return 1 if self.remaining else 0

    def line(self) -> str:
        checked = ", ".join(f"{count} {what}" for what, count in self.checked.items())
        total = self.found.total()
        if not total:
            return f"aifs fsck: {self.state_dir}: clean; checked {checked}"
        remaining = self.remaining
        left = ", ".join(f"{kind} {count}" for kind, count in sorted(remaining.items()))
        return (
            f"aifs fsck: {self.state_dir}: {total} problem(s) found, {self.repaired.total()} repaired, "
            f"{remaining.total()} remaining" + (f" ({left})" if left else "") + f"; checked {checked}"
        )

    def as_json(self) -> dict[str, Any]:
        return {"summary": {
            "state_dir": self.state_dir, "found": dict(self.found), "repaired": dict(self.repaired),
            "remaining": dict(self.remaining), "checked": self.checked, "clean": not self.remaining,
        }}


def show_name(name: bytes) -> str:
    """A file name for a report line; bytes that are not UTF-8 are shown as escapes."""
    return name.decode("utf-8", "backslashreplace")


def show_key(key: bytes) -> str:
    """A metadata key as `TAG owner rest`, for example `D 1 "a.txt"`, `B 57 3` or `U 00000000000000a1`."""
    tag = key[:1].decode()
    if tag in ("U", "G"):
        return f"{tag} {keys.read_u64(key, 1):016x}"
    if tag == "C":
        return f"C {show_name(key[1:])}"
    rest = key[9:]
    if tag == "B":
        return f"B {keys.read_u64(key, 1)} {keys.read_u64(rest)}"
    return f"{tag} {keys.read_u64(key, 1)}" + (f' "{show_name(rest)}"' if rest else "")
