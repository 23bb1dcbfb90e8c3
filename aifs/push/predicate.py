"""The filter's predicate language: conditions on a record's fields, all of which must hold.

A condition is `FIELD OP VALUE`, e.g. `lang == "en"` or `meta.score >= 0.5`: FIELD a name or
a dotted path into nested objects, OP one of == != < <= > >=, VALUE a JSON literal. It is
parsed into a (field, op, value) triple, which is also what travels to a server: nothing is
evaluated as code. A record that is not a JSON object, lacks the field, or holds a value of
another type than VALUE (numbers compare with numbers, strings with strings) does not match.
"""

import json
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}
_CONDITION = re.compile(r"\s*([A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*)\s*(==|!=|<=|>=|<|>)\s*(.+?)\s*")
_MISSING = object()


class BadCondition(ValueError):
    """A condition that is not `FIELD OP VALUE`; the message says what to write."""


def _kind(value: Any) -> type:
    """Values compare only with values of their kind; bool is not a number here."""
    if isinstance(value, bool):
        return bool
    return float if isinstance(value, int | float) else type(value)


@dataclass(frozen=True, slots=True)
class Condition:
    path: tuple[str, ...]
    op: str
    value: Any

    @classmethod
    def parse(cls, text: str) -> "Condition":
        found = _CONDITION.fullmatch(text)
        if found is None:
            raise BadCondition(f"{text!r} is not a condition; write FIELD OP VALUE, e.g. 'lang == \"en\"' "
                               f"(OP one of {' '.join(OPS)})")
        field, op, literal = found.groups()
        try:
            value = json.loads(literal)
        except json.JSONDecodeError:
            raise BadCondition(f"{literal!r} in {text!r} is not a JSON value; quote strings: \"en\"") from None
        return cls.checked(field, op, value)

    @classmethod
    def checked(cls, field: Any, op: Any, value: Any) -> "Condition":
        """A condition from its parts as they travel, each checked."""
        if not isinstance(field, str) or not field or op not in OPS:
            raise BadCondition(f"({field!r:.40}, {op!r:.10}) is not a field and one of {' '.join(OPS)}")
        if isinstance(value, dict | list) and op not in ("==", "!="):
            raise BadCondition(f"{op} compares numbers or strings, not {type(value).__name__}s")
        return cls(tuple(field.split(".")), op, value)

    def as_wire(self) -> list[Any]:
        return [".".join(self.path), self.op, self.value]

    def holds(self, record: Any) -> bool:
        found = record
        for name in self.path:
            found = found.get(name, _MISSING) if isinstance(found, dict) else _MISSING
        if found is _MISSING or _kind(found) is not _kind(self.value):
            return False
        return OPS[self.op](found, self.value)


def matches(conditions: Sequence[Condition], line: bytes) -> bool:
    """Whether the JSON record on `line` meets every condition."""
    try:
        record = json.loads(line)
    except ValueError:  # not JSON, or not UTF-8
        return False
    return isinstance(record, dict) and all(condition.holds(record) for condition in conditions)
