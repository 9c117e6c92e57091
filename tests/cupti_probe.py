"""On a GPU, in a process of its own (PyTorch may hold another libcupti): one CUPTI range-profiler
session (tracker/profilers/cupti_session.py) over the first layer phase of a small network, that
phase replayed once per pass (tracker/gpu/replay.py). Prints one JSON line: the passes it took, the
kernels one plain run of the phase launched, and each range's name and metric values.
tests/test_gpu.py::test_a_cupti_range_session_counts_each_launch runs it."""

from __future__ import annotations

import json

METRICS = ("gpu__time_duration.sum", "smsp__inst_executed.sum", "dram__bytes_read.sum")


def main() -> None:
    from samples import tiny_net

    from tracker.gpu.cupy_backend import CupyBackend
    from tracker.gpu.network import PlanRunner
    from tracker.gpu.replay import replay_step
    from tracker.profilers.cupti_session import PhasePasses, RangeSession

    backend = CupyBackend(timed=False)
    executor = PlanRunner(backend, tiny_net(), batch=2, chosen={})
    executor.iteration()  # compiled and run once before anything is counted
    step = executor.steps[0]
    first = len(backend.log)
    executor.step(step)
    launched = [record.kernel for record in backend.log[first:]]
    with RangeSession(METRICS, max_ranges=64) as session:
        phases = PhasePasses(session)
        passes = replay_step(executor, step, phases)
        [(_, ranges)] = phases.phases
    print(
        json.dumps(
            {"step": f"{step.layer.name}/{step.phase}", "passes": passes, "launched": launched, "ranges": ranges}
        )
    )


if __name__ == "__main__":
    main()
