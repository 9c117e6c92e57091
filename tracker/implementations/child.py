"""The child process a collector profiles (pass 2), for every implementation:

- ``python -m tracker.implementations.child profiled SPEC``: the planned workload's measured
  iterations between cudaProfilerStart and Stop, under ncu or nvprof (``ProfiledWorkload.command``);
- ``python -m tracker.implementations.child counted SPEC METRICS MOST FOLDER``: the same
  iterations counted by CUPTI's range profiler, each layer phase replayed per pass, the ranges
  written to FOLDER/ranges.json (for an implementation that cannot count in tracker's process:
  PyTorch's, whose libcupti must load before PyTorch loads its own).

SPEC is ``Workload.to_json()``, planned once in the parent, so the child launches what pass 1
logged, one for one.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tracker.gpu.workload import Workload
from tracker.implementations.registry import Implementation, implementation

if TYPE_CHECKING:
    from tracker.profilers.cupti_collector import Ranges

RANGES = "ranges.json"  # what ``counted`` leaves in its folder


def command(mode: str, workload: Workload, *args: str) -> list[str]:
    """The child's command line, for a profiler to wrap or a parent to run."""
    return [sys.executable, "-m", __name__, mode, workload.to_json(), *args]


@dataclass(frozen=True)
class ProfiledWorkload:
    """What pass 2 profiles (``tracker.profilers.Profiled``): the planned workload, as its
    implementation runs it."""

    workload: Workload
    implementation: Implementation

    def command(self) -> list[str]:
        return command("profiled", self.workload)

    def ranges(self, metrics: list[str], most: int, echo: Callable[[str], None]) -> Ranges:
        return self.implementation.ranges(self.workload, metrics, most, echo)


def main(mode: str, spec: str, *args: str) -> None:
    workload = Workload.from_json(spec)
    runs = implementation(workload.implementation)
    if mode == "profiled":
        runs.child(workload)
        return
    metrics, most, folder = args

    def count() -> None:
        say = lambda line: print(line, flush=True)  # noqa: E731
        phases, skipped, settings = runs.replay(workload, json.loads(metrics), int(most), say)
        found = {"phases": phases, "skipped": skipped, "settings": settings}
        (Path(folder) / RANGES).write_text(json.dumps(found))

    runs.in_child(count)


if __name__ == "__main__":
    main(*sys.argv[1:])
