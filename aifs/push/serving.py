"""A block server's side of pushdown: which transforms it runs, and one piece's answer.

Only the transforms its admin enabled run (`aifs flash serve --transforms ...` on a flash
server, `[cluster] transforms` on a mount that serves its peers), and a mask only with the
patterns registered there; anything else is refused with a message that says how to enable
it. A job's tokenizer is kept by its hash (the last few loaded), so a client sends each
tokenizer once per server: a server that lacks it answers NEED_TOKENIZER.
"""

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aifs.push.mask import Mask, MaskPattern, from_wire as pattern_from_wire, load_patterns
from aifs.push.records import Split
from aifs.push.tokenize import Tokenize, tokenizer_hash
from aifs.push.transforms import BAD_ARGUMENTS, NAMES, BadTransform, Transform, from_wire

NEED_TOKENIZER = "tokenizer"  # error code: send the job again with the tokenizer file
TOKENIZERS_KEPT = 4


class TransformRefused(Exception):
    """This server does not run the job as asked; the message says why and what to do."""


class NeedTokenizer(TransformRefused):
    """The job's tokenizer is not among those this server keeps."""


@dataclass(frozen=True, slots=True)
class AdminKeys:
    """Where a server's admin enables a transform (`{name}` is its name) and registers mask
    patterns: what a refusal tells the client to ask for."""

    transforms: str
    mask_patterns: str


FLASH_SERVER = AdminKeys("`aifs flash serve --transforms {name}`", "--mask-patterns FILE")
PEER_NODE = AdminKeys('`transforms = ["{name}"]` in the [cluster] table of its mount config',
                      '`mask_patterns = "FILE"` in its [cluster] table')


def enabled_names(names: Iterable[str]) -> frozenset[str]:
    """The transforms named (blank names ignored); raises ValueError naming an unknown one."""
    enabled = frozenset(name.strip() for name in names if name.strip())
    unknown = enabled - set(NAMES)
    if unknown:
        raise ValueError(f"unknown transform {', '.join(sorted(unknown))}; there are {', '.join(NAMES)}")
    return enabled


class ServedTransforms:
    def __init__(self, enabled: Iterable[str], patterns: dict[str, MaskPattern], keys: AdminKeys) -> None:
        self.enabled = frozenset(enabled)
        self.patterns = patterns
        self.keys = keys
        self._tokenizers: OrderedDict[tuple[str, str | None], Transform] = OrderedDict()  # by (hash, field)

    def transform(self, job: dict[str, Any], tokenizer: bytes | None) -> Transform:
        """The transform `job` asks for, as this server runs it; raises TransformRefused."""
        name, args = job["name"], job["args"]
        if name not in self.enabled:
            raise TransformRefused(f"this server does not run the {name} transform (its admin enables it with "
                                   f"{self.keys.transforms.format(name=name)})")
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
                                       f"job has it (its admin registers patterns with {self.keys.mask_patterns})")

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


def served_transforms(names: Iterable[str], mask_patterns: Path | None, keys: AdminKeys) -> ServedTransforms:
    """What an admin enabled: the transforms `names`, and mask patterns from the file
    `mask_patterns` besides the built-in ones; raises ValueError for what cannot be."""
    enabled = enabled_names(names)
    patterns = load_patterns(mask_patterns)
    if mask_patterns is not None and Mask.name not in enabled:
        raise ValueError(f"mask patterns are for the mask transform, which is not enabled; enable it with "
                         f"{keys.transforms.format(name=Mask.name)}")
    return ServedTransforms(enabled, patterns, keys)


def piece_answer(transform: Transform, piece: bytes | memoryview) -> tuple[dict[str, Any], bytes]:
    """One piece's answer: its head and tail raw, the records between transformed (aifs.push.records)."""
    split = Split.of(bytes(piece))
    result = transform(split.body)
    header = {"head": len(split.head), "result": len(result), "tail": len(split.tail), "whole": split.whole}
    return header, split.head + result + split.tail
