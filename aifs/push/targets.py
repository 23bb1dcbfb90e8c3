"""Which files a push job reads and where each result goes: a source file's result is
`DST/NAME`, and a source directory's files keep their paths below it (`DST/SUBDIR/...`)."""

import os
from dataclasses import dataclass
from pathlib import Path


class BadTargets(ValueError):
    """Sources or destination that cannot be used; the message says what to change."""


@dataclass(frozen=True, slots=True)
class Target:
    source: Path
    output: Path


def _files(source: Path) -> list[tuple[Path, Path]]:
    """(file, its path relative to what it is found under) of every regular file at or below `source`."""
    if source.is_file():
        return [(source, Path(source.name))]
    if not source.is_dir():
        raise BadTargets(f"{source}: no such file or directory")
    found = []
    for root, directories, names in os.walk(source):
        directories.sort()
        for name in sorted(names):
            path = Path(root) / name
            if path.is_file() and not name.startswith("."):
                found.append((path, path.relative_to(source)))
    return found


def targets(sources: list[Path], out: Path) -> list[Target]:
    """Every source file and its result's path."""
    if not sources:
        raise BadTargets("give at least one source file or directory")
    if out.exists() and not out.is_dir():
        raise BadTargets(f"--out {out} is a file; give a directory for the results (made if missing)")
    found: dict[Path, Path] = {}
    for source in sources:
        for path, relative in _files(source):
            output = out / relative
            if output in found:
                raise BadTargets(f"{found[output]} and {path} would both be written to {output}; "
                                 f"push them to different --out directories")
            if output.resolve() == path.resolve():
                raise BadTargets(f"{path} would be overwritten by its own result; choose another --out")
            found[output] = path
    return [Target(path, output) for output, path in found.items()]
