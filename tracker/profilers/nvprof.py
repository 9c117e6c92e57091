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
from tracker.metrics import Source, Sources
from tracker.profilers.ncu_csv import ProfiledLaunch, columns, normalise, number, read_csv

_LEVEL = re.compile(r"^\s*[A-Za-z]+ \((\d+)\)\s*$")  # "High (8)"
_WITH_UNIT = re.compile(r"^\s*([-+]?[\d.,]+(?:[eE][-+]?\d+)?)\s*([A-Za-z%/]+)\s*$")  # "636.79GB/s", "83.3%"
_COUNT = re.compile(r"[0-9]{1,20}")
_TRACE_IDENTITY = ("Start", "Name", "Device", "Context", "Stream", "Correlation_ID")


S = Source
# nvprof's name for each catalog metric it collects (its --query-metrics names), scaled into the
# catalog's unit: its occupancy is a fraction, the catalog's a percentage.
SOURCES = Sources(
    "nvprof",
    (
        S("duration_ns", "Duration", requested=False),  # the GPU trace's own column, in every row unasked
        S("cycles_elapsed", "elapsed_cycles_sm"),
        S("fadd", "flop_count_sp_add"),
        S("fmul", "flop_count_sp_mul"),
        S("ffma", "flop_count_sp_fma"),
        S("fp32_flops", "flop_count_sp"),
        S("fp32_inst", "inst_fp_32"),
        S("instructions", "inst_executed"),
        S("stall_imc_miss", "stall_constant_memory_dependency"),
        S("stall_long_scoreboard", "stall_memory_dependency"),
        S("stall_no_instruction", "stall_inst_fetch"),
        S("stall_not_selected", "stall_not_selected"),
        S("stall_sleeping", "stall_sleeping"),
        S("stall_tex_throttle", "stall_texture"),
        S("stall_exec_dependency", "stall_exec_dependency"),
        S("stall_memory_throttle", "stall_memory_throttle"),
        S("stall_pipe_busy", "stall_pipe_busy"),
        S("stall_sync", "stall_sync"),
        S("stall_other", "stall_other"),
        S("l1_hit_rate", "tex_cache_hit_rate"),
        S("l2_hit_rate", "l2_tex_hit_rate"),
        S("l2_read_hit_rate", "l2_tex_read_hit_rate"),
        S("l2_write_hit_rate", "l2_tex_write_hit_rate"),
        S("l1_global_load_requests", "global_load_requests"),
        S("l1_global_load_sectors", "gld_transactions"),
        S("l1_global_store_requests", "global_store_requests"),
        S("l1_global_store_sectors", "gst_transactions"),
        S("l1_local_load_sectors", "local_load_transactions"),
        S("l1_local_store_sectors", "local_store_transactions"),
        S("shared_load_wavefronts", "shared_load_transactions"),
        S("shared_store_wavefronts", "shared_store_transactions"),
        S("l2_read_sectors", "l2_read_transactions"),
        S("l2_write_sectors", "l2_write_transactions"),
        S("dram_read_sectors", "dram_read_transactions"),
        S("dram_write_sectors", "dram_write_transactions"),
        S("achieved_occupancy", "achieved_occupancy", scale=100.0),
        S("sm_efficiency", "sm_efficiency"),
        S("ipc", "ipc"),
        S("issue_slot_pct", "issue_slot_utilization"),
        S("eligible_warps", "eligible_warps_per_cycle"),
        S("warp_execution_efficiency", "warp_execution_efficiency"),
        S("fp32_fu_utilization_level", "single_precision_fu_utilization"),
        S("ldst_fu_utilization_level", "ldst_fu_utilization"),
        S("special_fu_utilization_level", "special_fu_utilization"),
        S("shared_utilization_level", "shared_utilization"),
        S("l1_utilization_level", "tex_utilization"),
        S("l2_utilization_level", "l2_utilization"),
        S("dram_utilization_level", "dram_utilization"),
    ),
)


def command(program: list[str], metrics: list[str], log: str, nvprof: str = "nvprof") -> list[str]:
    """nvprof over ``program``: per-launch metrics between cudaProfilerStart/Stop, CSV into ``log``."""
    return [
        nvprof,
        "--profile-from-start",
        "off",
        "--print-gpu-trace",
        "--csv",
        "--normalized-time-unit",
        "ns",
        "--metrics",
        ",".join(metrics),
        "--log-file",
        log,
        *program,
    ]


def metric_names() -> list[str]:
    return SOURCES.requested()


def parse_query_metrics(text: str) -> set[str]:
    """Metric names from ``nvprof --query-metrics``: one ``name:  description`` line each, under a
    ``Device 0 (...)`` line."""
    return {
        line.split(":", 1)[0].strip()
        for line in text.splitlines()
        if ":" in line and _METRIC_NAME.fullmatch(line.split(":", 1)[0].strip())
    }


_METRIC_NAME = re.compile(r"[a-z][a-z0-9_]*")


def value(text: str) -> float | None:
    """A value cell: plain numbers, ``83.3%``, ``636.79GB/s`` (to bytes/second), ``High (8)`` (to 8).
    Every figure goes through ``number``, so nvprof refuses what ncu refuses (``1e999%`` is no rate)."""
    level = _LEVEL.match(text)
    if level:
        return number(level.group(1))
    match = _WITH_UNIT.match(text)  # never matches a plain number: a unit needs a letter, % or /
    if not match:
        return number(text)
    amount, unit = number(match.group(1)), match.group(2)
    if amount is None or unit == "%":  # None only for n/a or empty, which an amount with a digit is not
        return amount
    return normalise(amount, unit.replace("B", "byte").replace("/s", "/second"))[0]


def _invocations(text: str, what: str) -> int:
    """The Invocations cell: at most 20 digits, a 64-bit counter's width. A longer run of digits is
    damage, and int() refuses one of over 4,300 digits with a bare ValueError."""
    if not _COUNT.fullmatch(text):
        raise ParseError(
            f"{what}: cannot read the invocations '{text[:40]}' ({len(text)} characters): "
            "not a whole number of at most 20 digits"
        )
    return int(text)


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
        invocations = _invocations(row[calls_at], f"{where} {what}")
        try:
            entry = kernels.setdefault(row[kernel_at], {"invocations": invocations, "raw": {}})
            entry["raw"][row[name_at]] = value(row[avg_at])
        except ValueError:
            raise ParseError(f"{where}: cannot read '{row[avg_at][:40]}' {what}") from None
    return {k: {"invocations": e["invocations"], "values": SOURCES.translate(e["raw"])} for k, e in kernels.items()}


# The plain-text lines are read by splitting on whitespace, not by regular expressions: the one
# this replaced, a lazy description between runs of whitespace, backtracked in time cubic in a
# line's length (a line of 4,000 spaces: minutes).
_LEVEL_TOKENS = re.compile(r"[A-Za-z]+ \(\d+\)")  # "High (8)", split in two tokens
_NAME = re.compile(r"\w+")


def parse_metrics_text(text: str, where: str = "nvprof output") -> dict[str, dict]:
    """nvprof's plain-text ``--metrics`` output (no ``--csv``): per ``Kernel:`` line, one line per
    metric (Invocations, Metric Name, Metric Description, Min, Max, Avg); the same result as
    ``parse_metrics``."""
    kernels: dict[str, dict] = {}
    kernel = None
    for number_, line in enumerate(text.lstrip("\ufeff").splitlines(), 1):
        at = f"{where}: line {number_}"
        tokens = line.split()
        if tokens[:1] == ["Kernel:"]:
            name = line.split("Kernel:", 1)[1].strip()
            if not name:
                raise ParseError(f"{at}: a 'Kernel:' line names no kernel")
            kernel = kernels.setdefault(name, {"invocations": 0, "raw": {}})
        elif kernel is not None and len(tokens) >= 5 and tokens[0].isdecimal() and _NAME.fullmatch(tokens[1]):
            values = [_cell(cell, f"{at}: {tokens[1][:40]}") for cell in _metric_cells(line, tokens, at)]
            known = [v for v in values if v is not None]  # n/a, or an empty instance list: no value
            kernel["raw"][tokens[1]] = sum(known) / len(known) if known else None  # per SM: the average
            kernel["invocations"] = _invocations(tokens[0], at)
    if not kernels:
        raise ParseError(f"{where} holds no nvprof metrics (no 'Kernel:' line)")
    return {k: {"invocations": e["invocations"], "values": SOURCES.translate(e["raw"])} for k, e in kernels.items()}


def _metric_cells(line: str, tokens: list[str], at: str) -> list[str]:
    """The cells a metric line (count, name, description, Min, Max, Avg) contributes: its Avg, or
    for ``sm_efficiency (80 instances) ... [ 99.99% ... ]`` the values listed per SM."""
    if tokens[2][:1] == "(" and tokens[2][1:].isdecimal() and tokens[3] == "instances)":
        listed, bracket, after = line.partition("[")[2].rpartition("]")  # the first [ follows "instances)"
        if not bracket or after.strip():
            raise ParseError(f"{at}: {tokens[1][:40]} lists no per-instance values in [ ... ] (cut short?)")
        return listed.split()
    last = " ".join(tokens[-2:])
    return [last if _LEVEL_TOKENS.fullmatch(last) else tokens[-1]]  # "High (8)" or one token


def _cell(text: str, what: str) -> float | None:
    """``value(text)``, or a ParseError that names the cell."""
    try:
        return value(text)
    except ValueError:
        raise ParseError(
            f"{what}: cannot read the value '{text[:40]}' (a finite number, with a unit or as 'Level (n)')"
        ) from None


def _kernel_name(cell: str) -> str:
    """A trace's Name less its `` [correlation id]``. Partitioned, not matched by a regex search,
    which tries every start and backtracks over a run of spaces: quadratic in the cell's length."""
    name, bracket, tail = cell.rpartition("[")
    return name.rstrip() if bracket and tail[-1:] == "]" and tail[:-1].isdecimal() else cell


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
        launch = ProfiledLaunch(len(launches), _kernel_name(row[name_at]))
        raw: dict[str, float | None] = {}
        for column, unit, cell in zip(header, units, row):
            if column in _TRACE_IDENTITY or not cell:
                continue
            if column in SOURCES.by_name:  # a figure tracker keeps: a number or n/a
                raw[column] = _cell(cell, f"{where}: launch {launch.id} ({launch.kernel[:80]}), {column}")
            else:
                try:
                    raw[column] = value(cell)
                except ValueError:
                    launch.attributes[column] = cell
                    continue
            duration = raw[column]
            if column == "Duration" and duration is not None:  # n/a: a launch nvprof did not time
                raw[column] = normalise(duration, unit or "ns")[0]
        launch.values = raw
        launch.metrics = {"duration_ns": None, **SOURCES.translate(raw)}  # None: a launch nvprof did not time
        launches.append(launch)
    return launches
