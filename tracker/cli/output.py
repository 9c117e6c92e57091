"""Rendering rows as an aligned table (for people), CSV or JSON (for programs).

Tables shorten numbers (210.8M, 1.42 GiB) and shapes (96x55x55); CSV and JSON keep every digit.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any, Iterable

FORMATS = ("table", "csv", "json")


def _si(value: float) -> str:
    for scale, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= scale:
            return f"{value / scale:.4g}{suffix}"
    return f"{value:.4g}"


def _iec(value: float) -> str:
    for scale, suffix in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(value) >= scale:
            scaled = value / scale
            return f"{scaled:.{0 if scaled >= 100 else 1 if scaled >= 10 else 2}f} {suffix}"
    return f"{value:.0f} B"


def _shape(value: list) -> str:
    return "x".join(str(v) for v in value)


def cell(column: str, value: Any) -> str:
    """A value as a table shows it."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return _shape(value) if all(isinstance(v, int) for v in value) else ", ".join(map(str, value))
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "-"
    if isinstance(value, (int, float)) and "bytes" in column:
        return _iec(value)
    if isinstance(value, int):
        return _si(value) if abs(value) >= 100_000 else str(value)
    if isinstance(value, float):
        if abs(value) >= 100_000:
            return _si(value)
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def table(rows: list[dict], columns: Iterable[str] | None = None) -> str:
    columns = list(columns or (rows[0].keys() if rows else []))
    if not rows:
        return "(no rows)"
    body = [[cell(c, row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in body)) for i, c in enumerate(columns)]
    numeric = [all(_looks_numeric(r[i]) for r in body) for i in range(len(columns))]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    return "\n".join([line(columns), line(["-" * w for w in widths]), *(line(r) for r in body)])


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
