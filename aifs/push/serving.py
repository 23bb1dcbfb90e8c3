"""A block server's side of pushdown: which transforms it runs, and one piece's answer.

Only the transforms its admin enabled (`aifs flash serve --transforms ...`) run, and a mask
only with the patterns registered there; anything else is refused with a message that says
how to enable it. A job's tokenizer is kept by its hash (the last few loaded), so a client sends
each tokenizer once per server: a server that lacks it answers NEED_TOKENIZER.
"""

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from aifs.push.mask import Mask, MaskPattern, from_wire as pattern_from_wire
from aifs.push.records import Split
from aifs.push.tokenize import Tokenize, tokenizer_hash
from aifs.push.transforms import BAD_ARGUMENTS, NAMES, BadTransform, Transform, from_wire

NEED_TOKENIZER = "tokenizer"  # error code: send the job again with the tokenizer file
TOKENIZERS_KEPT = 4


class TransformRefused(Exception):
    """This server does not run the job as asked; the message says why and what to do."""


class NeedTokenizer(TransformRefused):
    """The job's tokenizer is not among those this server keeps."""


def enabled_names(text: str) -> frozenset[str]:
    """The transforms of a comma-separated list; raises ValueError naming an unknown one."""
    names = frozenset(name.strip() for name in text.split(",") if name.strip())
    unknown = names - set(NAMES)
    if unknown:
        raise ValueError(f"unknown transform {', '.join(sorted(unknown))}; there are {', '.join(NAMES)}")
    return names


class ServedTransforms:
    def __init__(self, enabled: Iterable[str], patterns: dict[str, MaskPattern]) -> None:
        self.enabled = frozenset(enabled)
        self.patterns = patterns
        self._tokenizers: OrderedDict[tuple[str, str | None], Transform] = OrderedDict()  # by (hash, field)

    def transform(self, job: dict[str, Any], tokenizer: bytes | None) -> Transform:
        """The transform `job` asks for, as this server runs it; raises TransformRefused."""
        name, args = job["name"], job["args"]
        if name not in self.enabled:
            raise TransformRefused(f"this server does not run the {name} transform (its admin enables it with "
                                   f"`aifs flash serve --transforms {name}`)")
        try:
            if name == Tokenize.name:
                return self._tokenize(args, tokenizer)
            if name == Mask.name:
                self._check_registered(args.get("patterns"))
            return from_wire(name, args)
        except (BadTransform, *BAD_ARGUMENTS) as e:
            raise TransformRefused(str(e)) from None

    def _check_registered(self, patterns: Any) -> None:
        for parts in patterns if isinstance(patterns, list) else []:
            pattern = pattern_from_wire(parts)
            if self.patterns.get(pattern.name) != pattern:
                raise TransformRefused(f"mask pattern {pattern.name!r} is not registered on this server as the "
                                       f"job has it (its admin registers patterns with --mask-patterns FILE)")

    def _tokenize(self, args: dict[str, Any], tokenizer: bytes | None) -> Transform:
        digest, field = args.get("tokenizer"), args.get("field")
        if not isinstance(digest, str) or not (field is None or isinstance(field, str)):
            raise TransformRefused("tokenize needs the tokenizer's hash and a field name or none")
        key = (digest, field)
        kept = self._tokenizers.get(key)
        if kept is None:
            if tokenizer is None:
                raise NeedTokenizer("this server does not hold the job's tokenizer; send it with the job")
            if tokenizer_hash(tokenizer) != digest:
                raise TransformRefused("the tokenizer sent does not match the job's hash of it")
            kept = from_wire(Tokenize.name, args, tokenizer)
            self._keep(key, kept)
        return kept

    def _keep(self, key: tuple[str, str | None], tokenizer: Transform) -> None:
        self._tokenizers[key] = tokenizer
        while len(self._tokenizers) > TOKENIZERS_KEPT:
            self._tokenizers.popitem(last=False)


def piece_answer(transform: Transform, piece: bytes | memoryview) -> tuple[dict[str, Any], bytes]:
    """One piece's answer: its head and tail raw, the records between transformed (aifs.push.records)."""
    split = Split.of(bytes(piece))
    result = transform(split.body)
    header = {"head": len(split.head), "result": len(result), "tail": len(split.tail), "whole": split.whole}
    return header, split.head + result + split.tail
