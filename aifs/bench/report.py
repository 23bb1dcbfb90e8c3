"""Turns Results into what `aifs bench` prints: an aligned table or JSON."""

import json

from aifs.bench.workload import Result, Results

TIME_UNITS = ("s", "ms", "µs")  # rows where less is better


def _rows(results: Results) -> dict[str, Result]:
    """Every result name, in order, with one of its results (for the unit). Paths ran the same
    plan, but a mode may fill a row in some columns only (per node, where a column has nodes)."""
    rows: dict[str, Result] = {}
    for per_path in results.values():
        for name, result in per_path.items():
            rows.setdefault(name, result)
    return rows


def _number(value: float) -> str:
    """Thousands separators for big numbers, three significant digits for small ones."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:#.3g}"


def _ratio(first: Result | None, last: Result | None) -> str:
    return _number(first.value / last.value) if first and last and last.value else "-"


def speedup(first: Result, second: Result) -> float:
    """How many times as fast `first` is as `second`: their quotient, turned round for times."""
    return second.value / first.value if first.unit in TIME_UNITS else first.value / second.value


def plainly(times: float) -> str:
    """A speed-up in words: "1.50x faster", or "2.00x slower" rather than "0.50x faster"."""
    return f"{times:.2f}x faster" if times >= 1 else f"{1 / times:.2f}x slower"


def _named_ratio(first: Result | None, second: Result | None) -> str:
    """A ratio a mode asked for: the quotient of rates; for times, how many times faster in words,
    as their bare quotient would read the wrong way round."""
    if not (first and second and first.value and second.value):
        return "-"
    return plainly(speedup(first, second)) if first.unit in TIME_UNITS else _number(first.value / second.value)


class _Footnotes:
    """Marks results that carry a note ("1,234 [1]") and lists the notes under the table."""

    def __init__(self, results: Results) -> None:
        every = (result for per_path in results.values() for result in per_path.values())
        notes = dict.fromkeys(result.note for result in every if result.note)
        self._marks = {note: f"[{i}]" for i, note in enumerate(notes, 1)}
        self._width = max((len(mark) + 1 for mark in self._marks.values()), default=0)

    def cell(self, result: Result | None) -> str:
        """The value, its mark if any, padded so that digits line up down a column; "-" for none."""
        if result is None:
            return "-".ljust(self._width + 1)
        mark = f" {self._marks[result.note]}" if result.note else ""
        return f"{_number(result.value)}{mark.ljust(self._width)}"

    def lines(self) -> list[str]:
        return [f"{mark} {note}" for note, mark in self._marks.items()]


def _align(rows: list[list[str]]) -> list[str]:
    """Text columns (workload, unit) left-aligned, number columns right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    justify = [str.ljust, str.ljust] + [str.rjust] * (len(widths) - 2)
    return ["  ".join(j(c, w) for j, c, w in zip(justify, row, widths)).rstrip() for row in rows]


def to_table(results: Results, ratio: tuple[str, str] | None = None) -> str:
    """One row per result, one column per path, and a first/last ratio column when comparing,
    or the ratio of the two columns named in `ratio` (see _named_ratio)."""
    paths = list(results)
    pair = ratio or ((paths[0], paths[-1]) if len(paths) > 1 else None)
    quotient = _named_ratio if ratio else _ratio
    footnotes = _Footnotes(results)
    rows = [["workload", "unit", *paths] + ([f"{pair[0]} / {pair[1]}"] if pair else [])]
    for name, sample in _rows(results).items():
        per_path = [results[path].get(name) for path in paths]
        cells = [quotient(*(results.get(path, {}).get(name) for path in pair))] if pair else []
        rows.append([name, sample.unit, *map(footnotes.cell, per_path), *cells])
    lines = _align(rows)
    lines.insert(1, "-" * max(map(len, lines)))
    return "\n".join(lines + footnotes.lines())


def to_json(results: Results, scale: float, goals: list[str] | None = None) -> str:
    """{"scale", "units": {result: unit}, "results": {result: {path: value}} (only paths that have it),
    "notes": {result: {path: note}} (only results that have notes), and "goals": [line] for a mode}."""
    rows = _rows(results)
    document = {
        "scale": scale,
        "units": {name: sample.unit for name, sample in rows.items()},
        "results": {name: {path: r[name].value for path, r in results.items() if name in r} for name in rows},
        "notes": {
            name: notes
            for name in rows
            if (notes := {path: r[name].note for path, r in results.items() if name in r and r[name].note})
        },
    }
    if goals is not None:
        document["goals"] = goals
    return json.dumps(document, indent=2, ensure_ascii=False)


def render(results: Results, scale: float, as_json: bool, goals: list[str] | None = None,
           ratio: tuple[str, str] | None = None) -> str:
    """What `aifs bench` prints: JSON, or the table (with a mode's `ratio` column) followed by its goal lines."""
    if as_json:
        return to_json(results, scale, goals)
    return "\n".join([to_table(results, ratio), *(goals or [])])
