"""An Nsight Compute CSV page (``ncu --csv --page raw``, or the details page), as ncu prints it
or exports it from a report (``ncu --import profile.ncu-rep --csv --page raw``).

Read by the parser tracker's own pass 2 reads ncu with (``tracker.profilers.ncu_csv``): every
launch a row (raw) or a row per metric (details), units normalised. Each launch's counters are
the catalog's under ncu's names, as a report's are (``ncu_rep.launch``); its ranges are the
NVTX push/pop ranges of the raw page's ``--nvtx`` column, outermost first. A CSV page holds no
clock or cache control: the run's settings are empty.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

from tracker.errors import ParseError, TrackerError
from tracker.importers.base import Imported, ImportedLaunch

MOST_BYTES = 1 << 30  # the largest page read: ncu's own CSV of a few hundred thousand launches
# One push/pop range in the --nvtx column: "<domain>:<name>:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
RANGE = re.compile(r'"([^"]*)"')
RANGE_FIELDS = 6  # after the name


def read(path: Path) -> Imported:
    from tracker.importers.ncu_rep import launch
    from tracker.profilers.ncu_csv import PUSH_POP, parse

    if path.stat().st_size > MOST_BYTES:
        raise TrackerError(f"cannot import {path}: it holds more than {MOST_BYTES / 2**30:g} GiB of CSV")
    try:
        text = path.read_text(encoding="utf-8-sig", errors="strict")
        profiled = parse(text, str(path))
    except (ParseError, UnicodeDecodeError, ValueError) as exc:
        raise TrackerError(f"cannot read {path} as an Nsight Compute CSV page: {exc}") from None
    if not profiled:
        raise TrackerError(f"{path} holds no profiled kernel")
    launches: list[ImportedLaunch] = []
    for kernel in profiled:
        cells: dict[str, str | float | None] = {**kernel.attributes, **kernel.values}
        column = next((name for name in cells if name.startswith(PUSH_POP)), None)
        ranges = _ranges(str(cells[column])) if column else ()
        launches.append(launch(kernel.kernel, ranges, partial(_cell, cells)))
    first: dict[str, str | float | None] = {**profiled[0].attributes, **profiled[0].values}
    name = first.get("device__attribute_display_name")  # the details page's Device column is an index
    return Imported(
        str(path),
        "ncu-csv",
        "ncu",
        "ncu CSV page (version not recorded in the page)",
        None if name is None else str(name),
        _capability(first),
        None if (sms := _number(first.get("device__attribute_multiprocessor_count"))) is None else int(sms),
        {},
        launches,
        {metric: name for k in profiled for metric, name in _sources(k.values).items()},
    )


def _ranges(cell: str) -> tuple[str, ...]:
    """The names of the ranges in an --nvtx cell, outermost first."""
    names = []
    for entry in RANGE.findall(cell):
        parts = entry.split(":")
        names.append(":".join(parts[1:-RANGE_FIELDS]) if len(parts) > RANGE_FIELDS + 1 else entry)
    return tuple(names)


def _number(value) -> float | None:
    return value if isinstance(value, int | float) else None


def _cell(cells: dict, name: str) -> float | None:
    """A launch's number of that ncu name, or None (a text cell, or no such column)."""
    return _number(cells.get(name))


def _capability(cells: dict) -> str | None:
    major = _number(cells.get("device__attribute_compute_capability_major"))
    minor = _number(cells.get("device__attribute_compute_capability_minor"))
    if major is not None:
        return f"{int(major)}.{int(minor or 0)}"
    return str(cells["CC"]) if cells.get("CC") else None


def _sources(values: dict) -> dict[str, str]:
    from tracker.profilers.ncu import SOURCES

    return {s.metric: s.name for s in SOURCES.all if values.get(s.name) is not None}
