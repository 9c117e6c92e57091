"""Rendering rows as an aligned table (for people), CSV or JSON (for programs).

Tables shorten numbers through tracker.units (211M, 1.52 GB, 49.3 ms) and shapes (96x55x55), each
cell with its own unit, under headers that name the quantity and no unit (median_ms -> 'median
(time)'); CSV and JSON keep every digit, in the unit the column's name says.
"""

from __future__ import annotations

import csv
import io
import json
import math
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

from tracker import units

FORMATS = ("table", "csv", "json")


def _shape(value: list) -> str:
    return "x".join(str(v) for v in value)


def cell(column: str, value: Any) -> str:
    """A value as a table shows it: tracker.units' formatter, '-' where there is none."""
    return units.cell(column, value, missing="-")


CELL_CHARS = 200  # a table shows this much of a longer text or bytes value, and its length


def held(value: Any) -> Any:
    """``value`` as a table holds it until it is aligned: text or bytes over ``CELL_CHARS`` cut,
    with their length, so that a table of long values takes no more memory than it shows."""
    if isinstance(value, (str, bytes)) and len(value) > CELL_CHARS:
        if isinstance(value, str):
            return f"{value[:CELL_CHARS]}... ({len(value):,} characters)"
        return f"{value[: CELL_CHARS // 4]!s}... ({len(value):,} bytes)"  # a byte shows as up to 4 characters
    return value


def table(rows: list[dict], columns: Iterable[str] | None = None) -> str:
    columns = list(columns or (rows[0].keys() if rows else []))
    if not rows:
        return "(no rows)"
    body = [[cell(c, row.get(c)) for c in columns] for row in rows]
    headers = [units.header(c) for c in columns]
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(headers)]
    numeric = [all(_looks_numeric(r[i]) for r in body) for i in range(len(columns))]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in body)])


WIDTH = 100  # a record's lines wrap at this many characters


def record(row: dict) -> str:
    """One row for people as 'key: value' lines, the keys aligned and long values wrapped under
    their start; empty values left out."""
    shown = {units.header(k): cell(k, v) for k, v in row.items() if not units.is_missing(v) and v != ""}
    width = max(map(len, shown), default=0)
    return "\n".join(
        textwrap.fill(
            value,
            WIDTH,
            initial_indent=f"{key:>{width}}: ",
            subsequent_indent=" " * (width + 2),
            break_long_words=False,
            break_on_hyphens=False,
        )
        for key, value in shown.items()
    )


def _looks_numeric(text: str) -> bool:
    return text == "-" or text[:1].isdigit() or (text[:1] == "-" and text[1:2].isdigit())


def _csv_value(value: Any) -> Any:
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return _shape(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return value


def to_csv(rows: list[dict], columns: Iterable[str] | None = None) -> str:
    columns = list(columns or (rows[0].keys() if rows else []))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([_csv_value(row.get(c)) for c in columns] for row in rows)
    return out.getvalue().rstrip("\n")


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, default=str)


def render(rows: list[dict], fmt: str, columns: Iterable[str] | None = None) -> str:
    """Rows in ``fmt``; ``columns`` picks and orders them (JSON keeps only those too)."""
    columns = list(columns) if columns else None
    if fmt == "json":
        return to_json([{c: row.get(c) for c in columns} if columns else row for row in rows])
    if fmt == "csv":
        return to_csv(rows, columns)
    return table(rows, columns)


def stream(columns: list[str], rows: Iterable[tuple], fmt: str, write: Callable[[str], Any]) -> None:
    """Rows as CSV or JSON, as ``render`` writes them plus a last newline, written as they come
    (64 KiB at a time): what a query returns need not fit in memory."""
    out = io.StringIO()

    def flush(at_least: int = 0) -> None:
        if out.tell() >= at_least:
            write(out.getvalue())
            out.seek(0)
            out.truncate()

    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_csv_value(v) for v in row])
            flush(1 << 16)
    else:
        out.write("[")
        count = 0
        for count, row in enumerate(rows, 1):
            out.write(("," if count > 1 else "") + "\n" + textwrap.indent(to_json(dict(zip(columns, row))), "  "))
            flush(1 << 16)
        out.write("\n]\n" if count else "]\n")
    flush()


def records(frame: Any) -> list[dict]:
    """DataFrame rows as plain dicts (NaN -> None) for the renderers."""
    return [
        {k: (None if v is None or (isinstance(v, float) and math.isnan(v)) else v) for k, v in row.items()}
        for row in frame.to_dict("records")
    ]
