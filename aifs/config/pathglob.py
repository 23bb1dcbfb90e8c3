"""Path globs for [[rules]]: fnmatch-style, except that only `**` crosses '/'."""

import functools
import re


@functools.lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a glob once; rules are matched on every create, so this is a hot path."""
    parts, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            parts.append("(?:.*/)?")  # zero or more whole directories
            i += 3
        elif pattern.startswith("**", i):
            parts.append(".*")
            i += 2
        elif pattern[i] == "*":
            parts.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            parts.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (end := _class_end(pattern, i)) > 0:
            parts.append(_char_class(pattern[i + 1 : end]))
            i = end + 1
        else:
            parts.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(parts) + r"\Z", re.DOTALL)


def _class_end(pattern: str, start: int) -> int:
    """Index of the ']' closing the class at `start`, or -1 so an unclosed '[' is literal."""
    i = start + 1
    if pattern.startswith("!", i):
        i += 1
    if pattern.startswith("]", i):
        i += 1  # a ']' right after '[' or '[!' is a member, as in fnmatch
    return pattern.find("]", i)


def _char_class(body: str) -> str:
    """Translate a class body; a negated class never matches '/', which separates names."""
    negate = body.startswith("!")
    if negate:
        body = body[1:]
    members = "".join(c if c == "-" else re.escape(c) for c in body)
    return f"[^/{members}]" if negate else f"[{members}]"
