"""Pass 2 of the library arm under CUPTI's range profiler, in a child process of its own:
``python -m tracker.profilers.cupti_child WORKLOAD METRICS MOST FOLDER``.

The libcupti is loaded before PyTorch loads one (with its nvperf libraries, from its own folder:
``cupti_range.library``), so that the process holds one: PyTorch links to the one already loaded.
The step warms up, and each measured iteration runs every layer phase once per counter pass
(``TorchStep.iteration(passes)``, ``ModuleStep``'s). The ranges of each layer phase, one per launch in launch
order with their metric values, the metrics CUPTI does not know and how it counted go to
FOLDER/ranges.json; the parent joins the ranges onto pass 1's launches
(tracker/profilers/cupti_collector.py). It ends as pass 1's child does (``torch_run.child_main``).

On an H200 the suite's library arm under cupti joins every launch of the whole step
(tests/data/gpu-2026-11-26e-h200 and -26f-h200).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from tracker.gpu.workload import Workload

RANGES = "ranges.json"  # what the child leaves in its folder


def count(workload: Workload, metrics: list[str], most: int, echo: Callable[[str], None]) -> dict:
    """The ranges of ``workload``'s measured iterations, each layer phase replayed per pass, the
    metrics skipped and how it counted: {"phases": [[phase, [[name, {metric: value}], ...]], ...], "skipped": [...],
    "settings": {...}}."""
    from tracker.profilers import cupti_range

    cupti_range.library()  # before PyTorch loads its own
    from tracker.library.torch_run import step_of, warm_up
    from tracker.profilers.cupti_session import PhasePasses, RangeSession

    step = step_of(workload)
    warm_up(step, workload.warmup, echo)
    with RangeSession(metrics, most) as session:
        passes = PhasePasses(session)
        for r in range(workload.repeat):
            step.iteration(passes)
            echo(f"iteration {r + 1}/{workload.repeat}: {sum(len(ranges) for _, ranges in passes.phases)} ranges")
        return {"phases": passes.phases, "skipped": session.skipped, "settings": session.settings}


def _child(spec: str, metrics: str, most: str, folder: str) -> None:
    from tracker.library.torch_run import child_main

    def work() -> None:
        found = count(Workload.from_json(spec), json.loads(metrics), int(most), lambda line: print(line, flush=True))
        (Path(folder) / RANGES).write_text(json.dumps(found))

    child_main(work)


if __name__ == "__main__":
    _child(*sys.argv[1:5])
