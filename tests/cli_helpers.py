"""Running `python -m aifs ...` as a subprocess and checking how it answered."""

from __future__ import annotations

import subprocess

from conftest import aifs_cli


def aifs(*args: object) -> subprocess.CompletedProcess:
    return aifs_cli(*(str(a) for a in args), timeout=120)


def aifs_ok(*args: object, quiet: bool = False) -> subprocess.CompletedProcess:
    """The command succeeded (and with `quiet`, printed nothing on stderr)."""
    cp = aifs(*args)
    assert cp.returncode == 0, f"aifs {' '.join(map(str, args))}: exit {cp.returncode}\n{cp.stdout}\n{cp.stderr}"
    assert not (quiet and cp.stderr), cp.stderr
    return cp


def refused(cp: subprocess.CompletedProcess, *phrases: str) -> None:
    """A clear one-line refusal: exit 1, no traceback, every phrase in the message."""
    assert cp.returncode == 1, f"exit {cp.returncode}\n{cp.stdout}\n{cp.stderr}"
    assert "Traceback" not in cp.stderr and cp.stderr.startswith("aifs: "), cp.stderr
    for phrase in phrases:
        assert phrase in cp.stderr, cp.stderr
