"""The tokenize transform: each record becomes one line, the JSON list of its token ids.

The tokenizer is a Hugging Face `tokenizers` JSON file on the volume: the client reads it
and sends it with the job (a server keeps the last few it was sent, by their hash, so each
is sent once per server). With a field name, a record is a JSON object whose field holds
the text (a record without it gives an empty list); without one, the record's line is the
text. Every record gives exactly one line, so line N of the output belongs to record N.
"""

import json
from typing import Any

import xxhash

from aifs.push.records import NEWLINE, records


class BadTokenizer(ValueError):
    """A tokenizer file the `tokenizers` library cannot load; the message says why."""


def tokenizer_hash(spec: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(spec)


def _load(spec: bytes) -> Any:
    try:
        from tokenizers import Tokenizer  # the optional extra `push`
    except ImportError:
        raise BadTokenizer("tokenize needs the tokenizers library: pip install 'aifs[push]'") from None
    try:
        return Tokenizer.from_str(spec.decode())
    except Exception as e:  # the library raises plain Exceptions for a bad file
        raise BadTokenizer(f"not a tokenizers JSON file: {e}") from None


class Tokenize:
    name = "tokenize"

    def __init__(self, spec: bytes, field: str | None = None) -> None:
        self.spec = spec
        self.field = field
        self.digest = tokenizer_hash(spec)
        self._tokenizer = _load(spec)

    def args(self) -> dict[str, Any]:
        return {"tokenizer": self.digest, "field": self.field}

    def _text(self, record: bytes) -> str:
        line = record.rstrip(NEWLINE).decode(errors="replace")
        if self.field is None:
            return line
        try:
            found = json.loads(line)
        except ValueError:
            return ""
        text = found.get(self.field) if isinstance(found, dict) else None
        return text if isinstance(text, str) else ""

    def __call__(self, data: bytes) -> bytes:
        texts = [self._text(record) for record in records(data)]
        if not texts:
            return b""
        encodings = self._tokenizer.encode_batch(texts, add_special_tokens=False)
        return b"".join(json.dumps(e.ids, separators=(",", ":")).encode() + NEWLINE for e in encodings)
