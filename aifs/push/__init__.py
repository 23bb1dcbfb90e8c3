"""Pushdown: data-cleaning transforms run by the block servers that hold a file's blocks,
which send back only the result (`aifs push`, docs/pushdown.md).

    import aifs.push
    report = aifs.push.filter(["/mnt/aifs/raw"], "/mnt/aifs/clean", where=['lang == "en"', "score >= 0.5"])
    aifs.push.mask(["/mnt/aifs/clean"], "/mnt/aifs/masked", patterns=["email", "phone"])
    aifs.push.tokenize(["/mnt/aifs/masked"], "/mnt/aifs/tokens", tokenizer="/mnt/aifs/tok.json", field="text")

Each takes the job options of `aifs.push.job.run` (timeout, workers, progress, note) and
returns its PushReport; errors are ValueError (bad arguments) or PushError.
"""

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from aifs.push.job import PushError, PushReport, run
from aifs.push.mask import Mask, chosen, load_patterns
from aifs.push.predicate import Condition
from aifs.push.tokenize import Tokenize
from aifs.push.transforms import Filter

Paths = Iterable[str | os.PathLike]

__all__ = ["PushError", "PushReport", "filter", "mask", "tokenize"]


def filter(sources: Paths, out: str | os.PathLike, where: Sequence[str], **options: Any) -> PushReport:  # noqa: A001
    """Keep the JSON Lines records that meet every condition of `where` (aifs.push.predicate)."""
    return run(Filter([Condition.parse(text) for text in where]), sources, out, **options)


def mask(sources: Paths, out: str | os.PathLike, patterns: Sequence[str] = ("email", "phone"),
         patterns_file: str | os.PathLike | None = None, **options: Any) -> PushReport:
    """Replace every match of the named patterns with their placeholders (aifs.push.mask)."""
    known = load_patterns(Path(patterns_file) if patterns_file is not None else None)
    return run(Mask(chosen(patterns, known)), sources, out, **options)


def tokenize(sources: Paths, out: str | os.PathLike, tokenizer: str | os.PathLike, field: str | None = "text",
             **options: Any) -> PushReport:
    """Each record's token ids, one JSON list a line, with the `tokenizers` JSON file `tokenizer`
    (aifs.push.tokenize); `field` None tokenizes whole lines."""
    return run(Tokenize(Path(tokenizer).read_bytes(), field), sources, out, **options)
