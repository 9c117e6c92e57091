"""nvprof, for GPUs older than Volta (compute capability < 7.0), which Nsight Compute does not
support: the command line, and parsers of its CSV output mapped onto the metric catalog.

nvprof writes its tables to stderr, after ``==PID==`` lines. Two CSV shapes matter:
``--csv --metrics ...`` (one row per kernel name and metric, aggregated over its invocations:
Min, Max, Avg) and ``--csv --print-gpu-trace`` (one row per launch, a units row after the
header, kernel names suffixed with ``[correlation id]``). With ``--print-gpu-trace --metrics``
the trace gains one column per metric, which is what a per-launch join needs. Without ``--csv``
the metrics come as aligned text (``parse_metrics_text``), as in many published profiles. Values
carry their units (``83.3%``, ``636.79GB/s``, ``High (8)``).
"""

from __future__ import annotations

import re

from tracker.errors import ParseError
from tracker.metrics import CATALOG, from_nvprof
from tracker.profilers.ncu_csv import ProfiledLaunch, columns, normalise, number, read_csv

_LEVEL = re.compile(r"^\s*[A-Za-z]+ \((\d+)\)\s*$")  # "High (8)"
_WITH_UNIT = re.compile(r"^\s*([-+]?[\d.,]+(?:[eE][-+]?\d+)?)\s*([A-Za-z%/]+)\s*$")  # "636.79GB/s", "83.3%"
_CORRELATION = re.compile(r"\s*\[\d+\]$")
_TRACE_IDENTITY = ("Start", "Name", "Device", "Context", "Stream", "Correlation_ID")


def command(program: list[str], metrics: list[str], log: str) -> list[str]:
    """nvprof over ``program``: per-launch metrics between cudaProfilerStart/Stop, CSV into ``log``."""
    return ["nvprof", "--profile-from-start", "off", "--print-gpu-trace", "--csv", "--normalized-time-unit", "ns",
            "--metrics", ",".join(metrics), "--log-file", log, *program]


def metric_names() -> list[str]:
    return [m.nvprof for m in CATALOG if m.nvprof]


def value(text: str) -> float | None:
    """A value cell: plain numbers, ``83.3%``, ``636.79GB/s`` (to bytes/second), ``High (8)`` (to 8)."""
    level = _LEVEL.match(text)
    if level:
        return float(level.group(1))
    try:
        return number(text)
    except ValueError:
        pass
    match = _WITH_UNIT.match(text)
    if not match:
        raise ValueError(text)
    amount, unit = float(match.group(1).replace(",", "")), match.group(2)
    if unit == "%":
        return amount
    return normalise(amount, unit.replace("B", "byte").replace("/s", "/second"))[0]


def _rows(text: str, first: str, where: str) -> list[list[str]]:
    lines = text.lstrip("\ufeff").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(first)), None)
    if start is None:
        raise ParseError(f"{where} holds no nvprof CSV table (no line starts with {first})")
    rows = read_csv(lines, start, where)
    for i, row in enumerate(rows[1:], start + 2):
        if len(row) != len(rows[0]):
            raise ParseError(f"{where}: line {i} has {len(row)} fields, the header {len(rows[0])} (truncated?)")
    return rows


def parse_metrics(text: str, where: str = "nvprof output") -> dict[str, dict]:
    """``--csv --metrics`` output: kernel name -> {"invocations": n, "values": catalog name -> Avg}."""
    rows = _rows(text, '"Device","Kernel","Invocations","Metric Name"', where)
    header = rows[0]
    kernel_at, calls_at, name_at, avg_at = columns(header, ("Kernel", "Invocations", "Metric Name", "Avg"), where)
    kernels: dict[str, dict] = {}
    for row in rows[1:]:
        what = f"({row[name_at]} of {row[kernel_at]})"
        try:
            invocations = int(row[calls_at])
        except ValueError:
            raise ParseError(f"{where}: cannot read the invocations '{row[calls_at][:40]}' {what}") from None
        try:
            entry = kernels.setdefault(row[kernel_at], {"invocations": invocations, "raw": {}})
            entry["raw"][row[name_at]] = value(row[avg_at])
        except ValueError:
            raise ParseError(f"{where}: cannot read '{row[avg_at][:40]}' {what}") from None
    return {k: {"invocations": e["invocations"], "values": from_nvprof(e["raw"])} for k, e in kernels.items()}


_KERNEL_LINE = re.compile(r"^\s*Kernel: (.+?)\s*$")
_VALUE = r"(?:[A-Za-z]+ \(\d+\)|\S+)"  # "High (8)" or one token
_METRIC_LINE = re.compile(rf"^\s*(\d+)\s+(\w+)\s+(.*?)\s+({_VALUE})\s+({_VALUE})\s+({_VALUE})\s*$")
# "sm_efficiency (80 instances)  Multiprocessor Activity  -  -  [ 99.99% ... ]": one value per SM
_INSTANCES_LINE = re.compile(r"^\s*(\d+)\s+(\w+) \(\d+ instances\)\s+.*?\[(.*)\]\s*$")


def parse_metrics_text(text: str, where: str = "nvprof output") -> dict[str, dict]:
    """nvprof's plain-text ``--metrics`` output (no ``--csv``): per ``Kernel:`` line, one line per
    metric (Invocations, Metric Name, Metric Description, Min, Max, Avg); the same result as
    ``parse_metrics``."""
    kernels: dict[str, dict] = {}
    kernel = None
    for number_, line in enumerate(text.lstrip("\ufeff").splitlines(), 1):
        if (found := _KERNEL_LINE.match(line)):
            kernel = kernels.setdefault(found.group(1), {"invocations": 0, "raw": {}})
        elif kernel is not None and (metric := _INSTANCES_LINE.match(line) or _METRIC_LINE.match(line)):
            cells = metric.group(3).split() if metric.re is _INSTANCES_LINE else [metric.group(6)]
            try:
                values = [value(cell) for cell in cells]
            except ValueError:
                raise ParseError(f"{where}: line {number_}: cannot read {metric.group(2)} ({line.strip()[:60]})") \
                    from None
            known = [v for v in values if v is not None]  # n/a, or an empty instance list: no value
            kernel["raw"][metric.group(2)] = sum(known) / len(known) if known else None  # per SM: the average
            kernel["invocations"] = int(metric.group(1))
    if not kernels:
        raise ParseError(f"{where} holds no nvprof metrics (no 'Kernel:' line)")
    return {k: {"invocations": e["invocations"], "values": from_nvprof(e["raw"])} for k, e in kernels.items()}


def parse_trace(text: str, where: str = "nvprof output") -> list[ProfiledLaunch]:
    """``--csv --print-gpu-trace`` output: the kernel launches in order (memory copies left out),
    with Duration in ns as ``duration_ns`` and any metric columns mapped onto the catalog."""
    rows = _rows(text, '"Start","Duration"', where)
    if len(rows) < 2:
        raise ParseError(f"{where}: the GPU trace has no units row")
    header, units = rows[0], rows[1]
    (name_at,) = columns(header, ("Name",), where)
    launches: list[ProfiledLaunch] = []
    for row in rows[2:]:
        if row[name_at].startswith("[CUDA "):
            continue
        launch = ProfiledLaunch(len(launches), _CORRELATION.sub("", row[name_at]))
        raw: dict[str, float | None] = {}
        for column, unit, cell in zip(header, units, row):
            if column in _TRACE_IDENTITY or not cell:
                continue
            try:
                raw[column] = value(cell)
            except ValueError:
                launch.attributes[column] = cell
                continue
            duration = raw[column]
            if column == "Duration" and duration is not None:  # n/a: a launch nvprof did not time
                raw[column] = normalise(duration, unit or "ns")[0]
        launch.values = raw
        launch.metrics = {**from_nvprof(raw), "duration_ns": raw.get("Duration")}
        launches.append(launch)
    return launches
