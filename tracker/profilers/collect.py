"""Pass 2 with Nsight Compute: run the workload under ncu, export, parse and join onto pass 1.

Returns the metric rows to store and the ncu settings to record on the run; raises before
anything is stored when a step fails (see ``join`` for the checks).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from tracker.errors import BackendUnavailable
from tracker.gpu.workload import Workload
from tracker.errors import NcuFailed
from tracker.metrics import ncu_metrics
from tracker.profilers import ncu, ncu_csv
from tracker.profilers.join import join


@dataclass(frozen=True)
class Counters:
    rows: list[dict]  # (invocation, name, value)
    run_fields: dict  # ncu_version, replay, cache and clock control
    skipped: list[str]  # catalog metrics this GPU's ncu does not know
    note: str = ""  # a setting ncu could not have, and what ran instead


def usable_ncu() -> tuple[str, str]:
    """(path, version) of an ncu that runs; BackendUnavailable with the reason otherwise."""
    path = ncu.find()
    if path is None:
        raise BackendUnavailable("Nsight Compute (ncu) was not found on PATH, in $TRACKER_NCU or under "
                                 "/usr/local/cuda and /opt/nvidia/nsight-compute")
    return path, ncu.version(path)


def collect(workload: Workload, launches: list[dict], compute_capability: float, settings: ncu.Settings,
            echo: Callable[[str], None], keep_report: str | None = None) -> Counters:
    """Counters for every launch of pass 1 (``launches``, each with ``range`` = layer/phase);
    ``keep_report``: where to keep ncu's report."""
    path, version = usable_ncu()
    wanted = ncu_metrics(compute_capability)
    known = ncu.available_metrics(path)
    metrics = [m for m in wanted if m.split(".", 1)[0] in known]
    skipped = [m for m in wanted if m not in metrics]
    if skipped:
        echo(f"ncu {version} does not know {len(skipped)} catalog metrics on this GPU: {', '.join(skipped)}")
    echo(f"pass 2: ncu {version}, {len(metrics)} metrics, {len(launches)} launches to profile")
    note = ""
    with tempfile.TemporaryDirectory(prefix="tracker-ncu-") as tmp:
        report = Path(tmp) / "pass2.ncu-rep"
        try:
            ncu.run(ncu.command(path, metrics, report, workload.program(), settings), report, len(launches), echo)
        except NcuFailed as exc:
            if settings.clock_control != "base" or "clock" not in str(exc).lower():
                raise
            note = f"clock control none: ncu could not lock the clocks at base ({exc})"
            echo(f"{note}; profiling again with --clock-control none")
            settings = replace(settings, clock_control="none")
            ncu.run(ncu.command(path, metrics, report, workload.program(), settings), report, len(launches), echo)
        profiled = ncu_csv.parse(ncu.export(path, report), "the ncu report's raw page")
        named = ncu_csv.parse(ncu.export(path, report, nvtx_names=True), "the ncu report's NVTX names")
        if keep_report:
            shutil.copyfile(report, keep_report)
            echo(f"ncu report kept at {keep_report}")
    rows = join(launches, profiled, [launch.kernel for launch in named])
    fields = dict(ncu_version=version, ncu_replay_mode=settings.replay_mode,
                  ncu_cache_control=settings.cache_control, ncu_clock_control=settings.clock_control)
    return Counters(rows, fields, skipped, note)
