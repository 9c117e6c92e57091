"""The one number formatter: every number a person reads (CLI tables, report pages, figure labels,
findings) goes through here, three significant figures with its unit ('49.3 ms', '2.04 TB/s',
'885k', '41.2%', '1.16x'). Programs read CSV and JSON, which keep every digit.

The unit of a table column is read from its name (``*_ms`` is milliseconds, ``*bytes*`` bytes,
``*_per_s`` a rate, ``*pct*`` a percentage, ``speedup`` a ratio), so a column means the same thing
on every surface. The one rule for names and units: a name that ends in a unit (``a_ms``,
``dram_gbps``, ``l2_kib``) holds bare numbers in that unit where programs read them (CSV, JSON, SQL);
a table for people shows every cell with its own unit, scaled to read ('693 ns', '3.15 µs'), under
a header that names the quantity and no unit ('a (time)': ``header``).
"""

from __future__ import annotations

import math
import re
from typing import Any

SHOWN_DIGITS = 3  # significant digits every table and finding shows a number to (stats.best_of's ties too)

_PREFIXES = (
    (1e15, "P"),
    (1e12, "T"),
    (1e9, "G"),
    (1e6, "M"),
    (1e3, "k"),
    (1.0, ""),
    (1e-3, "m"),
    (1e-6, "µ"),
    (1e-9, "n"),
    (1e-12, "p"),
)


def _digits(value: float) -> str:
    """Three significant figures without exponent notation: 885, 49.3, 1.16."""
    size = abs(value)
    if size == 0:
        return "0"
    if size < 0.995:
        return f"{value:.{SHOWN_DIGITS}g}"
    return f"{value:.{0 if size >= 99.95 else 1 if size >= 9.995 else 2}f}"


def si(value: float, unit: str = "", small: bool = True) -> str:
    """``value`` with an SI prefix: si(2.04e12, 'B/s') -> '2.04 TB/s', si(885123) -> '885k'.
    ``small`` allows the sub-unit prefixes (m, µ, n): seconds use them, counts do not."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}{' ' + unit if unit else ''}"
    for scale, prefix in _PREFIXES:
        if not small and scale < 1:
            break
        if abs(value) >= scale * 0.9995:
            text = _digits(value / scale)
            return f"{text} {prefix}{unit}" if unit else f"{text}{prefix}"
    return f"{value:.{SHOWN_DIGITS}g} {unit}".strip()


def tick(value: float, unit: str = "") -> str:
    """An axis tick: as short as exact ('100 TFLOP/s', '2.5 ms')."""
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale * 0.9995:
            return f"{value / scale:.{SHOWN_DIGITS}g} {prefix}{unit}".strip()
    return f"{value:.{SHOWN_DIGITS}g} {unit}".strip()


def seconds(value: float) -> str:
    """'49.3 ms', '885 µs', '1.20 s'."""
    return si(value, "s")


def milliseconds(value: float) -> str:
    return seconds(value / 1e3)


def nbytes(value: float) -> str:
    """Bytes in decimal SI, like the bandwidths beside them: '1.02 MB'; whole bytes below 1000
    exactly ('264 B', '4 B')."""
    if float(value).is_integer() and abs(value) < 1000:
        return f"{int(value)} B"
    return si(value, "B", small=False)


def kibibytes(value: float) -> str:
    """On-chip sizes as the specifications give them, in binary units: '48.0 KiB', '1.25 MiB'."""
    return f"{_digits(value / 1024)} MiB" if value >= 1024 else f"{_digits(value)} KiB"


def percent(value: float) -> str:
    return f"{_digits(value)}%"


def ratio(value: float) -> str:
    return f"{_digits(value)}x"


def count(value: float) -> str:
    """Counts in one format, three significant figures: '419', '41.1', '5.03k', '885k', '5.62G' (a
    whole number below 1000 is exact either way)."""
    if float(value).is_integer() and abs(value) < 1000:
        return str(int(value))
    return si(value, small=False) if abs(value) >= 1 else _digits(value)


def is_missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN, pandas NA and NaT are not equal to themselves
    except (TypeError, ValueError):
        return False


def cell(column: str, value: Any, missing: str = "") -> str:
    """``value`` of the column named ``column`` as a person reads it; ``missing`` for None/NaN."""
    if is_missing(value):
        return missing
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return "x".join(map(str, value)) if all(isinstance(v, int) for v in value) else ", ".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, str) or not hasattr(value, "__float__"):
        return str(value)
    return number(column, float(value))


# A name ending in a multiple of a unit: (the quantity, what one of the name's unit is in that
# quantity's: 'ms' is milliseconds, 'KiB' kibibytes, 'B/s' bytes per second).
SCALED = {
    "_ns": ("ms", 1e-6),
    "_us": ("ms", 1e-3),
    "_gbps": ("B/s", 1e9),
    "_gflops": ("FLOP/s", 1e9),
    "_tflops": ("FLOP/s", 1e12),
    "_mib": ("KiB", 1024),
    "_gb": ("bytes", 1e9),
}


def _scaled(column: str) -> tuple[str, float] | None:
    name = column.lower()
    return next((found for suffix, found in SCALED.items() if name.endswith(suffix)), None)


def in_base_unit(column: str, value: float) -> float:
    """``value`` of the column in its quantity's unit: a ``dram_gbps`` of 3350 is 3.35e12 B/s."""
    scaled = _scaled(column)
    return value * scaled[1] if scaled else value


def quantity(column: str) -> str:
    """What a column's name says its numbers are: 'ms', 'B/s', 'FLOP/s', '/s', 'bytes', 'KiB', 'pct',
    'ratio', 'intensity', 'id' or 'count'. The one reading of names that tables and axes share."""
    name = column.lower()
    scaled = _scaled(name)
    if scaled:
        return scaled[0]
    if name == "ms" or name.endswith("_ms") or name.startswith("ms_"):
        return "ms"
    if name.endswith("_per_s") or name.endswith("per_second"):
        return "B/s" if "bytes" in name else "FLOP/s" if "flop" in name else "/s"
    if "bytes" in name:
        return "bytes"
    if "_kib" in name:
        return "KiB"
    if "pct" in name or name.endswith("percent") or "hit_rate" in name:
        return "pct"
    if "speedup" in name or name.endswith("_ratio") or name == "ratio":
        return "ratio"
    if "intensity" in name or name.endswith("flop_per_byte"):
        return "intensity"
    if name.endswith("_id") or name in ("id", "batch", "repeat", "repeats", "position", "launches"):
        return "id"
    return "count"


_HEADER_UNITS = {
    "ms": "time",
    "pct": "%",
    "B/s": "B/s",
    "FLOP/s": "FLOP/s",
    "/s": "per s",
    "bytes": "bytes",
    "KiB": "bytes",
    "ratio": "x",
    "intensity": "FLOP/B",
}
# A unit in a name, dropped from its header: a word anywhere ('spread_pct_a'), or the name's ending.
_UNIT_WORD = re.compile(
    r"(^|_)(ms|ns|us|pct|percent|kib|mib|gb|gbps|gflops|tflops)(?=_|$)"
    r"|_(per_s|per_second|bytes|flop_per_byte)$",
    re.IGNORECASE,
)


def count_of(n: int, noun: str) -> str:
    """'1 figure', '3 figures': a count with its noun in the right number."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def header(column: str) -> str:
    """A column's name as a table's header: words, and the quantity its cells are in where they
    carry a unit ('batch_16_per_image_ms' -> 'batch 16 per image (time)', 'spread_pct' -> 'spread
    (%)'): the cells scale their own unit (µs, ms, s), so the header names the quantity."""
    unit = _HEADER_UNITS.get(quantity(column))
    words = _UNIT_WORD.sub("", column).replace("_", " ").strip()
    if unit is None:
        return words
    if words in ("", column.lower()) and quantity(column) == "ms":
        return "time"
    if unit == "per s":  # 'images_per_s' -> 'images/s'
        return f"{words}/s"
    return f"{words} ({unit})" if words != unit else words


def number(column: str, value: float) -> str:
    """A number formatted by what its column's name says it is."""
    kind, value = quantity(column), in_base_unit(column, value)
    if kind == "ms":
        return milliseconds(value)
    if kind.endswith("/s"):
        return si(value, kind, small=False)
    if kind == "bytes":
        return nbytes(value)
    if kind == "KiB":
        return kibibytes(value)
    if kind == "pct":
        return percent(value)
    if kind == "ratio":
        return ratio(value)
    if kind == "intensity":
        return f"{_digits(value)} FLOP/B"
    if kind == "id":
        return str(int(value)) if float(value).is_integer() else _digits(value)
    return count(value)


def axis_tick(column: str, value: float) -> str:
    """A tick on an axis of the column's numbers: as short as exact ('10 ms', '2 TB/s', '50%'),
    signed where negative ('-25%': a speedup figure's slowdowns)."""
    if value == 0:
        return "0"
    if value < 0:
        return "-" + axis_tick(column, -value)
    kind, value = quantity(column), in_base_unit(column, value)
    if kind == "ms":
        return tick(value / 1e3, "s")
    if kind == "pct":
        return f"{value:g}%"
    return tick(value, {"bytes": "B", "B/s": "B/s", "FLOP/s": "FLOP/s", "/s": "/s"}.get(kind, ""))
