"""The built-in transforms, as they run on a client and on a server alike.

A transform is a function over bytes that hold whole JSON Lines records, record by record,
so that transforming two pieces one after the other gives what transforming them together
does. `args()` is what a job sends a server, which rebuilds the transform with `from_wire`
and checks each argument on the way: a server runs only these transforms, with data as
arguments, never code.
"""

from collections.abc import Sequence
from typing import Any, Protocol

from aifs.push.mask import BadPattern, Mask, from_wire as pattern_from_wire
from aifs.push.predicate import BadCondition, Condition, matches
from aifs.push.records import records
from aifs.push.tokenize import BadTokenizer, Tokenize


class Transform(Protocol):
    name: str

    def args(self) -> dict[str, Any]:
        """The arguments a server needs to run the same transform."""

    def __call__(self, data: bytes) -> bytes:
        """The transform of `data`, which holds whole records."""


class BadTransform(ValueError):
    """A transform that cannot be built as asked; the message says why."""


BAD_ARGUMENTS = (BadCondition, BadPattern, BadTokenizer)


class Filter:
    """Keeps the records that meet every condition, byte for byte."""

    name = "filter"

    def __init__(self, conditions: Sequence[Condition]) -> None:
        self.conditions = tuple(conditions)

    def args(self) -> dict[str, Any]:
        return {"where": [c.as_wire() for c in self.conditions]}

    def __call__(self, data: bytes) -> bytes:
        return b"".join(record for record in records(data) if matches(self.conditions, record))


NAMES = (Filter.name, Mask.name, Tokenize.name)


def _list(args: dict[str, Any], key: str) -> list[Any]:
    value = args.get(key)
    if not isinstance(value, list):
        raise BadTransform(f"{key!r} must be a list")
    return value


def from_wire(name: str, args: dict[str, Any], tokenizer: bytes | None = None) -> Transform:
    """The transform a job describes; `tokenizer` is the tokenizer file's bytes. Raises BadTransform."""
    try:
        if name == Filter.name:
            return Filter([Condition.checked(*_parts(c)) for c in _list(args, "where")])
        if name == Mask.name:
            return Mask([pattern_from_wire(p) for p in _list(args, "patterns")])
        if name == Tokenize.name:
            field = args.get("field")
            if tokenizer is None or not (field is None or isinstance(field, str)):
                raise BadTransform("tokenize needs the tokenizer's bytes and a field name or none")
            return Tokenize(tokenizer, field)
    except BAD_ARGUMENTS as e:
        raise BadTransform(str(e)) from None
    raise BadTransform(f"no transform named {name!r}; there are {', '.join(NAMES)}")


def _parts(condition: Any) -> list[Any]:
    if not isinstance(condition, list) or len(condition) != 3:
        raise BadTransform(f"{condition!r:.60} is not a condition's [field, op, value]")
    return condition
