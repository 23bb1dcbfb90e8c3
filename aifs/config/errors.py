"""Turn pydantic's errors into one line an operator can act on: key, value, what is allowed."""

import difflib
import types
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from aifs.config.models import Config

_DISCRIMINATOR = "kind"
_MAX_CONTAINER_CHARS = 60
_WHY = {
    "bool_type": "must be true or false",
    "float_type": "must be a number",
    "int_type": "must be a whole number",
    "model_type": "must be a table",
    "model_attributes_type": "must be a table",
    "path_type": "must be a path string",
    "string_type": "must be a string",
}


class ConfigError(Exception):
    """A config problem the operator must fix; str() is the whole message."""


def from_validation_error(err: ValidationError, source: str) -> ConfigError:
    """Report the first problem only: one clear message beats a wall of follow-on errors."""
    return ConfigError(f"{source}: {explain(err.errors()[0])}")


def explain(error: ErrorDetails) -> str:
    """`key = value: why` for one pydantic error."""
    loc, kind = error["loc"], error["type"]
    ctx: dict[str, Any] = error.get("ctx") or {}
    key, _ = _walk(loc)
    value = error["input"]
    if "config_key" in ctx:  # a whole-config check that points at one key itself
        key, value = _join(key, ctx["config_key"]), ctx["config_value"]
    if kind == "union_tag_not_found":
        return f"{_join(key, _DISCRIMINATOR)}: required key is missing; {_tags_help(loc)}"
    if kind == "union_tag_invalid":
        key, value = _join(key, _DISCRIMINATOR), ctx["tag"]
        return f"{key} = {_show(value)}: unknown {_DISCRIMINATOR}; {_tags_help(loc)}"
    if kind == "missing":
        return f"{key}: required key is missing"
    if kind == "extra_forbidden":
        return f"{key} = {_show(value)}: {_unknown_key(loc)}"
    if kind == "list_type":
        return f"{key} = {_show(value)}: must be an array; write each entry as [[{key}]]"
    why = _WHY.get(kind) or error["msg"].replace("Input should be", "must be", 1)
    return f"{key} = {_show(value)}: {why}"


def _walk(loc: tuple[int | str, ...]) -> tuple[str, Any]:
    """Render a pydantic location as a dotted key and find the type found there.

    pydantic puts a discriminated union's tag into the location (`tiers.1.nvme.path`);
    the operator never wrote it, so it is dropped (`tiers[1].path`).
    """
    key, tp = "", Config
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(part, int):
            key += f"[{part}]"
            tp = get_args(tp)[0] if get_origin(tp) is list else None
        elif _is_union(tp):
            tp = next((m for m in get_args(tp) if part in _tags_of(m)), None)
        else:
            key = _join(key, part)
            fields = tp.model_fields if _is_model(tp) else {}
            tp = fields[part].annotation if part in fields else None
    return key, _unwrap(tp)


def _unknown_key(loc: tuple[int | str, ...]) -> str:
    """Name the keys allowed beside the unknown one, and the likely intended one."""
    _, holder = _walk(loc[:-1])
    if not _is_model(holder):
        return "unknown key"
    allowed = list(holder.model_fields)
    guess = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    hint = f"did you mean '{guess[0]}'? " if guess else ""
    return f"unknown key; {hint}allowed here: {', '.join(allowed)}"


def _tags_help(loc: tuple[int | str, ...]) -> str:
    _, union = _walk(loc)
    tags = [tag for member in get_args(union) for tag in _tags_of(member)]
    return "use one of " + ", ".join(repr(t) for t in tags)


def _tags_of(model: Any) -> tuple[str, ...]:
    return get_args(model.model_fields[_DISCRIMINATOR].annotation) if _is_model(model) else ()


def _unwrap(tp: Any) -> Any:
    return get_args(tp)[0] if get_origin(tp) is Annotated else tp


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _join(key: str, part: int | str) -> str:
    part = str(part)
    return f"{key}.{part}" if key and not part.startswith("[") else key + part


def _show(value: Any) -> str:
    """Show a value as it looked in the file; a whole table or array is cut short."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, Path)):
        return repr(str(value))
    text = repr(value)
    return text if len(text) <= _MAX_CONTAINER_CHARS else text[: _MAX_CONTAINER_CHARS - 3] + "..."
