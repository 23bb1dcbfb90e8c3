"""`aifs --version`, and the mount's log: lines a person can grep, rotated by size."""

from __future__ import annotations

import logging
import os
import re
import tomllib
from pathlib import Path

import pytest

from aifs.cli.logsetup import LogFile
from aifs.config import ConfigError, load_config
from conftest import REPO, TARGET, Volume, aifs_cli

GREPPABLE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: \S")


def test_version_is_the_package_version_on_one_line():
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    done = aifs_cli("--version")
    assert done.returncode == 0 and done.stdout == f"aifs {version}\n", done.stdout + done.stderr


def config_file(tmp_path: Path, logging_table: str) -> Path:
    path = tmp_path / "aifs.toml"
    path.write_text(f'[volume]\nstate_dir = "{tmp_path / "state"}"\n\n[logging]\n{logging_table}\n')
    return path


def test_rotation_settings_default_and_are_checked(tmp_path):
    defaults = load_config(config_file(tmp_path, "")).logging
    assert (defaults.max_size, defaults.keep) == (64 << 20, 5)
    set_here = load_config(config_file(tmp_path, 'max_size = "1MiB"\nkeep = 2')).logging
    assert (set_here.max_size, set_here.keep) == (1 << 20, 2)
    with pytest.raises(ConfigError, match=r"logging\.keep = 0"):
        load_config(config_file(tmp_path, "keep = 0"))


def test_log_file_keeps_at_most_keep_old_files(tmp_path):
    config = load_config(config_file(tmp_path, f'file = "{tmp_path / "logs" / "m.log"}"\nmax_size = "1KiB"\nkeep = 2'))
    logger = logging.getLogger("aifs.test.rotation")
    logger.propagate = False
    handler = LogFile(config)
    logger.addHandler(handler)
    try:
        for n in range(200):
            logger.warning("line %d of a log that outgrows its size", n)
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["m.log", "m.log.1", "m.log.2"]
    assert all(p.stat().st_size <= 1024 for p in (tmp_path / "logs").iterdir())
    assert "line 199 " in (tmp_path / "logs" / "m.log").read_text()


@pytest.mark.skipif(TARGET == "local", reason="needs a real aifs mount")
def test_background_mount_rotates_its_log_and_its_stderr_follows(tmp_path):
    """A full log rotates at the mount's first line; what the mount warned about while
    starting still reaches the command line, and its stderr writes to the new file."""
    volume = Volume(tmp_path)
    volume.config.write_text(volume.config.read_text().replace('kind = "objstore"', 'kind = "objstore"\ncapacity = "1PiB"')
                             + '\n[logging]\nmax_size = "4KiB"\nkeep = 2\n')
    log = volume.state_dir / "aifs.log"
    log.write_text("an old line\n" * 400)
    try:
        done = aifs_cli("mount", "-c", str(volume.config), "-d", str(volume.path))
        assert done.returncode == 0, done.stderr
        assert "aifs: warning: tiers[2] (objstore) capacity 1.0 PiB is more than" in done.stderr
        assert (volume.state_dir / "aifs.log.1").read_text().startswith("an old line\n")
        lines = log.read_text().splitlines()
        assert lines and all(GREPPABLE.match(line) for line in lines), lines
        pid = int((volume.state_dir / "lock").read_text().split()[0])
        assert os.stat(f"/proc/{pid}/fd/2").st_ino == log.stat().st_ino
    finally:
        volume.close()
