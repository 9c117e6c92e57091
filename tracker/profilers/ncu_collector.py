"""Pass 2 with Nsight Compute: run the workload under ncu, export, parse and join onto pass 1.

Returns the metric rows to store and the ncu settings to record on the run; raises before
anything is stored when a step fails (see ``join`` for the checks).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tracker.errors import BackendUnavailable, NcuFailed
from tracker.profilers import Counters, Options, Profiled, ncu, ncu_csv
from tracker.profilers.join import join

SOURCES = ncu.SOURCES  # what this collector calls the catalog's metrics

if TYPE_CHECKING:
    from tracker.gpu.workload import LoggedLaunch

FIRST_CC = 7.0  # Nsight Compute supports Volta and newer


def supports(compute_capability: float) -> bool:
    return compute_capability >= FIRST_CC


def find(options: Options) -> NcuCollector:
    """An ncu that runs, with its version; BackendUnavailable with the reason otherwise."""
    path = ncu.find()
    if path is None:
        raise BackendUnavailable(
            "Nsight Compute (ncu) was not found on PATH, in $TRACKER_NCU or under "
            "/usr/local/cuda and /opt/nvidia/nsight-compute"
        )
    return NcuCollector(path, ncu.version(path), options.ncu, options.keep_report)


def nvtx_ranges(profiled: list[ncu_csv.ProfiledLaunch], named: list[ncu_csv.ProfiledLaunch]) -> list[str | None]:
    """Each launch's NVTX range as the join reads it: its name in the export under
    ``--print-nvtx-rename kernel`` (``named``), None where the raw page (``profiled``) shows no
    range open on its thread (ncu then prints the bare kernel, which is no range)."""
    return [n.kernel if ncu_csv.in_push_pop_range(p) else None for p, n in zip(profiled, named)]


@dataclass(frozen=True)
class NcuCollector:
    path: str
    version: str
    settings: ncu.Settings = ncu.Settings()
    keep_report: str | None = None  # where to keep ncu's report
    name: str = "ncu"

    def describe(self) -> str:
        return f"ncu {self.version} at {self.path}"

    def collect(
        self, target: Profiled, launches: Sequence[LoggedLaunch], compute_capability: float, echo: Callable[[str], None]
    ) -> Counters:
        """Counters for ``launches`` (pass 1's of the measured iterations ``target`` runs:
        ``tracker.profilers.counted``), each checked against its kernel and NVTX range."""
        wanted = ncu.SOURCES.requested(compute_capability)
        known = ncu.available_metrics(self.path)
        metrics = [m for m in wanted if m.split(".", 1)[0] in known]
        skipped = [m for m in wanted if m not in metrics]
        if skipped:
            echo(f"ncu {self.version} does not know {len(skipped)} catalog metrics on this GPU: {', '.join(skipped)}")
        echo(f"pass 2: ncu {self.version}, {len(metrics)} metrics, {len(launches)} launches to profile")
        settings, note = self.settings, ""
        with tempfile.TemporaryDirectory(prefix="tracker-ncu-") as tmp:
            report = Path(tmp) / "pass2.ncu-rep"
            try:
                self._run(metrics, report, target, settings, len(launches), echo)
            except NcuFailed as exc:
                if settings.clock_control != "base" or "clock" not in str(exc).lower():
                    raise
                note = f"clock control none: ncu could not lock the clocks at base ({exc})"
                echo(f"{note}; profiling again with --clock-control none")
                settings = replace(settings, clock_control="none")
                self._run(metrics, report, target, settings, len(launches), echo)
            profiled = ncu_csv.parse(ncu.export(self.path, report), "the ncu report's raw page")
            named = ncu_csv.parse(ncu.export(self.path, report, nvtx_names=True), "the ncu report's NVTX names")
            if self.keep_report:
                shutil.copyfile(report, self.keep_report)
                echo(f"ncu report kept at {self.keep_report}")
        ranges = nvtx_ranges(profiled, named)
        outside = ranges.count(None) - sum(not launch.in_range for launch in launches)  # no layer phase's
        if outside > 0:
            echo(f"ncu: {outside} launches ran outside every NVTX range and are no layer phase's: left out")
        rows = join(launches, profiled, ranges)
        fields = dict(collector_version=self.version, collector_settings=asdict(settings))
        return Counters(rows, fields, ncu.SOURCES.names({row["name"] for row in rows}), skipped, note)

    def _run(
        self,
        metrics: list[str],
        report: Path,
        target: Profiled,
        settings: ncu.Settings,
        expected: int,
        echo: Callable[[str], None],
    ) -> None:
        ncu.run(ncu.command(self.path, metrics, report, target.command(), settings), report, expected, echo)
