"""The mask transform: every match of named patterns in a record is replaced by a placeholder.

Patterns are named regular expressions. `email` and `phone` are built in; an admin (for the
servers) or a user (for the client's own share of a job) adds more in a TOML file:

    [patterns.ssn]
    regex = '\\b\\d{3}-\\d{2}-\\d{4}\\b'
    placeholder = "<SSN>"

A job names the patterns it wants and carries their regexes, and a server runs it only when
each name is registered there with the same regex and placeholder: no regex that its admin
did not register ever runs on a server. Patterns apply record by record, in the order named,
so no match spans two records and a piece of a file is masked as the whole file would be.
"""

import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aifs.push.records import records


class BadPattern(ValueError):
    """A pattern file or name that cannot be used; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class MaskPattern:
    name: str
    regex: str
    placeholder: str

    def compiled(self) -> re.Pattern[bytes]:
        try:
            return re.compile(self.regex.encode())
        except re.error as e:
            raise BadPattern(f"pattern {self.name!r}: {self.regex!r} is not a regular expression: {e}") from None

    def as_wire(self) -> list[str]:
        return [self.name, self.regex, self.placeholder]


BUILTIN = {
    pattern.name: pattern for pattern in (
        MaskPattern("email", r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}", "<EMAIL>"),
        MaskPattern("phone", r"\+?\(?\d{1,4}\)?(?:[ .-]?\(?\d{2,4}\)?){2,4}\d", "<PHONE>"),
    )
}


def load_patterns(path: Path | None) -> dict[str, MaskPattern]:
    """The built-in patterns and those of the TOML file at `path` (which may redefine them)."""
    patterns = dict(BUILTIN)
    if path is None:
        return patterns
    try:
        table = tomllib.loads(path.read_text()).get("patterns", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise BadPattern(f"cannot read the mask patterns in {path}: {e}") from None
    for name, entry in table.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("regex"), str):
            raise BadPattern(f"{path}: [patterns.{name}] needs regex = '...' (and placeholder = \"...\")")
        pattern = MaskPattern(name, entry["regex"], str(entry.get("placeholder", f"<{name.upper()}>")))
        pattern.compiled()
        patterns[name] = pattern
    return patterns


def chosen(names: Iterable[str], known: dict[str, MaskPattern]) -> tuple[MaskPattern, ...]:
    """The patterns named, in order; raises BadPattern for a name that is not known."""
    picked = []
    for name in names:
        if name not in known:
            raise BadPattern(f"no mask pattern named {name!r}; known: {', '.join(sorted(known))} "
                             f"(add more with a patterns file)")
        picked.append(known[name])
    return tuple(picked)


def from_wire(parts: Any) -> MaskPattern:
    if not (isinstance(parts, list) and len(parts) == 3 and all(isinstance(p, str) for p in parts)):
        raise BadPattern(f"{parts!r:.60} is not a pattern's [name, regex, placeholder]")
    return MaskPattern(*parts)


class Mask:
    """Replaces every match of its patterns, record by record."""

    name = "mask"

    def __init__(self, patterns: Sequence[MaskPattern]) -> None:
        if not patterns:
            raise BadPattern("mask needs at least one pattern (--pattern NAME)")
        self.patterns = tuple(patterns)
        self._compiled = [(p.compiled(), p.placeholder.encode()) for p in self.patterns]

    def args(self) -> dict[str, Any]:
        return {"patterns": [p.as_wire() for p in self.patterns]}

    def _record(self, record: bytes) -> bytes:
        for regex, placeholder in self._compiled:
            record = regex.sub(lambda _: placeholder, record)
        return record

    def __call__(self, data: bytes) -> bytes:
        return b"".join(self._record(record) for record in records(data))
