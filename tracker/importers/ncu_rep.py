"""An Nsight Compute report (``.ncu-rep``), read through NVIDIA's ``ncu_report`` module (the
``ncu-report`` package on PyPI: no CUDA and no ncu install needed).

Every profiled kernel of every range is a launch, in the report's order; its counters are those of
the catalog under ncu's names (``ncu.SOURCES``, the names tracker's own pass 2 asks for), in the
catalog's units; its ranges are the NVTX push/pop ranges open around it, in every domain. A report
of ncu 2020 holds a launch's grid and block as sizes, not dimensions: they are stored as x.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracker.errors import TrackerError
from tracker.extras import install
from tracker.importers.base import Imported, ImportedLaunch

DEVICE = "device__attribute_display_name"
SETTINGS = {  # what the run records of how ncu profiled, where the report holds it
    "clock_control": "profiler__clock_control",
    "cache_control": "profiler__cache_control",
    "replay_mode": "profiler__replay_mode",
}


def read(path: Path) -> Imported:
    try:
        import ncu_report
    except ImportError:
        raise TrackerError(f"reading an Nsight Compute report needs ncu-report: {install('import')}") from None
    try:
        context = ncu_report.load_report(str(path))
    except Exception as exc:  # the module raises its own types (RuntimeError, FileNotFoundError, ...)
        raise TrackerError(f"cannot read {path} as an Nsight Compute report: {exc}") from None
    actions = [r.action_by_idx(i) for r in _ranges(context) for i in range(r.num_actions())]
    if not actions:
        raise TrackerError(f"{path} holds no profiled kernel: not an Nsight Compute report, or an empty one")
    first = actions[0]
    major, minor = (
        _value(first, "device__attribute_compute_capability_major"),
        _value(first, "device__attribute_compute_capability_minor"),
    )
    sm_count = _value(first, "device__attribute_multiprocessor_count")
    return Imported(
        str(path),
        "ncu-rep",
        "ncu",
        f"ncu report (read by ncu-report {getattr(ncu_report, '__version__', '') or _version(context)})",
        _value(first, DEVICE),
        None if major is None else f"{int(major)}.{int(minor or 0)}",
        None if sm_count is None else int(sm_count),
        {key: value for key, name in SETTINGS.items() if (value := _value(first, name)) is not None},
        [_launch(action) for action in actions],
        _sources(first),
    )


def _ranges(context: Any) -> list:
    return [context.range_by_idx(i) for i in range(context.num_ranges() or 0)]


def _version(context: Any) -> str:
    try:
        return str(context.get_version())
    except Exception:
        return "?"


def _value(action: Any, name: str) -> Any:
    """A metric's value: text for a string metric, else a float; None where the report lacks it."""
    metric = action.metric_by_name(name)
    if metric is None or not metric.has_value():
        return None
    return metric.as_string() if metric.kind() == metric.ValueKind_STRING else metric.as_double()


def _launch(action: Any) -> ImportedLaunch:
    return launch(action.name(action.NameBase_DEMANGLED), _nvtx(action), lambda name: _value(action, name))


def launch(kernel_name: str, ranges: tuple[str, ...], value: Callable[[str], Any]) -> ImportedLaunch:
    """One profiled kernel, from ``value``: its metric of that ncu name, or None (a report's or a
    CSV page's). Its counters are the catalog's, under ncu's names, in the catalog's units."""
    from tracker.profilers.ncu import SOURCES

    named = {s.name: value(s.name) for s in SOURCES.all}
    duration = value("gpu__time_duration.sum")  # ns
    registers = value("launch__registers_per_thread")
    return ImportedLaunch(
        kernel_name,
        ranges,
        _dims(value, "grid"),
        _dims(value, "block"),
        None if registers is None else int(registers),
        int(value("launch__shared_mem_per_block") or 0),
        None if duration is None else duration / 1e6,
        metrics={k: v for k, v in SOURCES.translate(named).items() if v is not None},
    )


def _dims(value: Callable[[str], Any], what: str) -> tuple[int, int, int]:
    """(x, y, z) where the profile holds them (launch__grid_dim_x, ...), else (size, 1, 1)."""
    dims = [value(f"launch__{what}_dim_{axis}") for axis in "xyz"]
    if all(d is not None for d in dims):
        return (int(dims[0]), int(dims[1]), int(dims[2]))
    size = value(f"launch__{what}_size")
    return (int(size or 0), 1, 1)


def _nvtx(action: Any) -> tuple[str, ...]:
    """The push/pop ranges open around the kernel, outermost first, every domain's in turn."""
    state = action.nvtx_state()
    if state is None:
        return ()
    found: list[str] = []
    for domain in state.domains():
        found += [str(name) for name in state.domain_by_id(domain).push_pop_ranges()]
    return tuple(found)


def _sources(action: Any) -> dict[str, str]:
    from tracker.profilers.ncu import SOURCES

    return {s.metric: s.name for s in SOURCES.all if _value(action, s.name) is not None}
