"""Read aifs.toml once at start; every problem becomes a ConfigError that stops the program."""

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from aifs.config.errors import ConfigError, from_validation_error
from aifs.config.models import Config

_DEFAULTS_SOURCE = "built-in defaults"
_TOML_POSITION = re.compile(r"\s*\(at (?:line (\d+), column (\d+)|end of document)\)$")


def load_config(path: Path | None, state_dir: Path | None = None) -> Config:
    """Load and validate `path` (None: the built-in defaults); `state_dir` comes from a CLI flag
    and beats volume.state_dir."""
    if path is None:
        return _validate({}, _DEFAULTS_SOURCE, Path.cwd(), state_dir)
    path = Path(path)
    return _validate(_read_toml(path), str(path), path.absolute().parent, state_dir)


def default_config(state_dir: Path | None = None) -> Config:
    """The configuration used when no file is given: ram, nvme and objstore tiers, all auto."""
    return load_config(None, state_dir)


def _validate(data: dict[str, Any], source: str, base_dir: Path, state_dir: Path | None) -> Config:
    """Relative paths in the file are anchored at `base_dir`, the file's own folder."""
    if state_dir is not None and isinstance(data.get("volume", {}), dict):
        override = str(Path(state_dir).expanduser().absolute())  # a flag is relative to the cwd
        data = {**data, "volume": {**data.get("volume", {}), "state_dir": override}}
    try:
        return Config.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise from_validation_error(exc, source) from exc


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (bad byte at offset {exc.start})") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(_syntax_message(path, text, exc)) from exc


def _syntax_message(path: Path, text: str, exc: tomllib.TOMLDecodeError) -> str:
    """tomllib puts the position at the end of its message; lead with it and quote the line."""
    message = str(exc)
    match = _TOML_POSITION.search(message)
    if match is None:
        return f"{path}: invalid TOML: {message}"
    lines = text.splitlines() or [""]
    if match.group(1):
        line, column = int(match.group(1)), int(match.group(2))
    else:
        line, column = len(lines), len(lines[-1]) + 1
    quoted = lines[line - 1].strip() if line <= len(lines) else ""
    return (
        f"{path}: line {line}, column {column}: invalid TOML: "
        f"{message[: match.start()]} in {quoted!r}"
    )
