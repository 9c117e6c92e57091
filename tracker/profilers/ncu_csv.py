"""Parsing Nsight Compute's CSV output: the raw page (one row per launch) and the details page
(one row per launch and metric), from any ncu since 2020, with units normalised.

Why tracker's own pass 2 reads CSV and not the ``.ncu-rep``: the CSV comes from the same ncu
binary that profiled, so it always matches that ncu's version and needs nothing importable beside
it. (NVIDIA's report reader is on PyPI now, as ``ncu-report``: ``tracker import`` reads a
``.ncu-rep`` with it, and a CSV page with this parser.) The parser tolerates what real files hold
(../shared/ncu/samples/SOURCES.md): a BOM, CRLF, ``==PROF==`` lines and the program's own output
before the header, thousands separators, ``n/a``, a units row (raw page), and kernel names with
commas.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field

from tracker.errors import ParseError
from tracker.profilers.ncu import SOURCES

HEADER_START = '"ID","Process ID",'


@dataclass
class ProfiledLaunch:
    id: int  # ncu's ID: the order of the launch among the profiled ones
    kernel: str  # "Kernel Name" as ncu printed it
    values: dict[str, float | None] = field(default_factory=dict)  # the tool's metric name -> value, base units
    units: dict[str, str] = field(default_factory=dict)  # the tool's metric name -> base unit
    attributes: dict[str, str] = field(default_factory=dict)  # non-numeric columns (Block Size, Device, ...)
    metrics: dict[str, float | None] = field(default_factory=dict)  # catalog name -> value: what the store keeps


# Scaled units ncu prints under --print-units auto, and their factor to the base unit. Time is
# stored in nanoseconds (ncu's base time unit), everything else in SI base units.
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_TIME = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
_PER_TIME = {"nsecond": 1e9, "ns": 1e9, "usecond": 1e6, "us": 1e6, "msecond": 1e3, "ms": 1e3, "second": 1.0, "s": 1.0}
_COUNTED = ("byte", "cycle", "inst", "sector", "request", "warp", "thread", "block", "wavefront", "pass")
_NUMBER = re.compile(r"^[-+]?(\d{1,3}(,\d{3})+|\d+)?(\.\d*)?([eE][-+]?\d+)?$")


def normalise(value: float, unit: str) -> tuple[float, str]:
    """``value`` in ``unit`` (as ncu prints it) in the base unit: (value, base unit)."""
    if unit in _TIME:
        return value * _TIME[unit], "nsecond"
    if unit.lower().endswith("hz"):
        return value * _PREFIX.get(unit[:-2].upper(), 1.0), "hz"
    top, _, bottom = unit.partition("/")
    scale = 1.0
    for base in _COUNTED:
        if top.endswith(base) and top[: -len(base)] in _PREFIX:
            scale, top = _PREFIX[top[: -len(base)]], base
            break
    if bottom in _PER_TIME:
        return value * scale * _PER_TIME[bottom], f"{top}/second"
    return value * scale, f"{top}/{bottom}" if bottom else top


def number(text: str) -> float | None:
    """A value cell as a float: thousands separators allowed; ``n/a`` and empty are None."""
    text = text.strip()
    if text in ("", "n/a", "N/A", "nan"):
        return None
    if not _NUMBER.match(text) or not any(c.isdigit() for c in text):
        raise ValueError(text)
    value = float(text.replace(",", ""))
    if not math.isfinite(value):  # 1e999: no counter is infinite
        raise ValueError(text)
    return value


def _table(text: str, where: str) -> list[list[str]]:
    text = text.lstrip("\ufeff")
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip("\ufeff").startswith(HEADER_START)), None)
    if start is None:
        errors = [line for line in lines if line.startswith("==ERROR==")]
        why = f": {errors[0]}" if errors else ' (no line starts with the header "ID","Process ID",...)'
        raise ParseError(f"{where} holds no ncu CSV table{why}")
    rows = read_csv(lines, start, where)
    width = len(rows[0])
    for i, row in enumerate(rows[1:], start + 2):
        if len(row) != width:
            raise ParseError(f"{where}: line {i} has {len(row)} fields, the header {width} (truncated output?)")
    return rows


def read_csv(lines: list[str], start: int, where: str) -> list[list[str]]:
    """The CSV rows from line ``start`` on, less profiler chatter (``==PROF==`` lines); a line the
    csv module refuses (a field over its 128 KiB limit, a stray quote) is a ParseError."""
    reader = csv.reader(lines[start:])
    try:
        return [row for row in reader if row and not row[0].startswith("==")]
    except csv.Error as exc:
        raise ParseError(f"{where}: line {start + reader.line_num}: {exc}") from None


def columns(header: list[str], names: tuple[str, ...], where: str) -> list[int]:
    """The positions of ``names`` in ``header``; a ParseError names the first one missing."""
    for name in names:
        if name not in header:
            raise ParseError(f"{where}: the header has no '{name}' column")
    return [header.index(name) for name in names]


def parse(text: str, where: str = "ncu output") -> list[ProfiledLaunch]:
    """The launches in ncu CSV ``text`` (raw or details page), in ID order."""
    rows = _table(text, where)
    header = rows[0]
    columns(header, ("ID", "Kernel Name"), where)
    if "Metric Name" in header or "Metric Value" in header:
        launches = _details(header, rows[1:], where)
    else:
        launches = _raw(header, rows[1:], where)
    for launch in launches.values():
        launch.metrics = SOURCES.translate(launch.values)
    return sorted(launches.values(), key=lambda launch: launch.id)


def _launch(launches: dict[int, ProfiledLaunch], row: list[str], header: list[str], where: str) -> ProfiledLaunch:
    try:
        launch_id = int(row[header.index("ID")].replace(",", ""))
    except ValueError:
        raise ParseError(f"{where}: launch ID '{row[header.index('ID')]}' is not a number") from None
    kernel = row[header.index("Kernel Name")]
    launch = launches.setdefault(launch_id, ProfiledLaunch(launch_id, kernel))
    if launch.kernel != kernel:
        raise ParseError(f"{where}: launch {launch_id} is named both '{launch.kernel}' and '{kernel}'")
    return launch


def _set(launch: ProfiledLaunch, name: str, cell: str, unit: str, where: str) -> None:
    try:
        value = number(cell)
    except ValueError:
        launch.attributes[name] = cell
        return
    if value is not None:
        value, unit = normalise(value, unit)
    if name in launch.values and launch.values[name] != value:
        raise ParseError(f"{where}: launch {launch.id} has two values for {name}")
    launch.values[name] = value
    launch.units[name] = unit


# The raw page's column (ncu --nvtx) of the NVTX push/pop ranges open on each launch's thread.
PUSH_POP = "thread Domain:Push/Pop_Range"


def in_push_pop_range(launch: ProfiledLaunch) -> bool:
    """False where the raw page shows no push/pop range open on the launch's thread (the column
    there, its cell empty); True where it shows one, or has no such column to tell."""
    column = next((name for name in [*launch.attributes, *launch.values] if name.startswith(PUSH_POP)), None)
    return column is None or bool(launch.attributes.get(column, "").strip())


_IDENTITY = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context", "Stream")


def _raw(header: list[str], rows: list[list[str]], where: str) -> dict[int, ProfiledLaunch]:
    """Raw page: one row per launch, every metric a column, and a units row first."""
    if not rows or rows[0][0] != "":
        raise ParseError(f"{where}: a raw-page table starts with a units row (empty ID), and this one does not")
    units, launches = rows[0], {}  # type: list[str], dict[int, ProfiledLaunch]
    for row in rows[1:]:
        launch = _launch(launches, row, header, where)
        for name, unit, cell in zip(header, units, row):
            if name not in _IDENTITY:
                _set(launch, name, cell, unit, where)
    return launches


def _details(header: list[str], rows: list[list[str]], where: str) -> dict[int, ProfiledLaunch]:
    """Details page: one row per launch, section and metric."""
    name_at, unit_at, value_at = columns(header, ("Metric Name", "Metric Unit", "Metric Value"), where)
    launches: dict[int, ProfiledLaunch] = {}
    for row in rows:
        launch = _launch(launches, row, header, where)
        for column in ("Block Size", "Grid Size", "Device", "CC"):
            if column in header:
                launch.attributes[column] = row[header.index(column)]
        _set(launch, row[name_at], row[value_at], row[unit_at], where)
    return launches
