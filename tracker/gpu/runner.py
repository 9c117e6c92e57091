"""The ``events`` backend (pass 1) and the GPU selftest: CuPy runs, everything else plans.

A profile compiles the kernels, runs warm-up iterations, then brackets the measured iterations
with cudaProfilerStart/Stop (so Nsight Compute with --profile-from-start off sees only them),
times every launch with CUDA events and returns the launch log in invocation order (an
iteration's kernel time is tracker/gpu/timing.py's ``launch_ms``). `tracker tune` is
tracker/tune.py's: nothing here imports the layer above (tune, profile, experiment).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracker.errors import BackendUnavailable, OutOfMemory
from tracker.extras import install
from tracker.gpu.network import PlanRunner
from tracker.gpu.timing import launch_ms
from tracker.gpu.workload import LoggedLaunch, Workload, tagged

if TYPE_CHECKING:
    from tracker.ops.gemm import Tile
    from tracker.ops.launch import LaunchRecord


@dataclass(frozen=True)
class Measured:
    launches: list[LoggedLaunch]  # in invocation order
    device: dict  # device_info()
    peak_bytes: int  # memory-pool high-water mark


def open_cupy_backend(l1_policy: str):
    """The CuPy backend compiling for ``l1_policy`` and its device; a clear error without CuPy."""
    try:
        from tracker.gpu.cupy_backend import CupyBackend, device_info
    except ImportError as exc:
        raise BackendUnavailable(f"the GPU backends need CuPy ({exc}): {install('gpu')}") from None
    return CupyBackend(l1_policy), device_info()


def profile_events(workload: Workload, echo: Callable[[str], None]) -> Measured:
    """Pass 1 of a planned workload on this GPU: every launch of the measured iterations, timed."""
    import cupy as cp

    backend, device = open_cupy_backend(workload.l1_policy)
    echo(f"device: {device['device_name']} (CC {device['compute_capability']}, {device['sm_count']} SMs)")
    try:
        launches, _ = measure(
            PlanRunner.of(backend, workload),
            workload.repeat,
            workload.warmup,
            workload.l1_policy,
            echo,
            around=(cp.cuda.profiler.start, cp.cuda.profiler.stop),
        )
    except cp.cuda.memory.OutOfMemoryError as exc:
        raise OutOfMemory(f"out of memory: {workload.network} at batch {workload.batch} ({exc})") from None
    return Measured(launches, device, backend.peak_bytes)


def run_child(workload: Workload) -> None:
    """Pass 2's child on our kernels (tracker/implementations/child.py): warm up, then the measured
    iterations between cudaProfilerStart/Stop, untimed (the profiler times them)."""
    import cupy as cp

    from tracker.gpu.cupy_backend import CupyBackend

    run = PlanRunner.of(CupyBackend(workload.l1_policy, timed=False), workload)
    measure(
        run,
        workload.repeat,
        workload.warmup,
        workload.l1_policy,
        lambda line: print(line, file=sys.stderr),
        around=(cp.cuda.profiler.start, cp.cuda.profiler.stop),
    )


def measure(
    run: PlanRunner,
    repeat: int,
    warmup: int,
    policy: str,
    echo: Callable[[str], None],
    around: tuple[Callable, Callable] = (lambda: None, lambda: None),
) -> tuple[list[LoggedLaunch], list[float]]:
    """Warm up, then run ``repeat`` measured iterations between ``around`` (cudaProfilerStart/Stop):
    (the launches in invocation order, kernel time per iteration)."""
    backend = run.b
    for i in range(warmup):
        echo(f"warm-up {i + 1}/{warmup} (the first compiles the kernels)")
        run.iteration()
        backend.synchronize()
    backend.log.clear()
    rows: list[LoggedLaunch] = []
    totals: list[float] = []
    start, stop = around
    start()
    try:
        for r in range(repeat):
            first = len(backend.log)
            run.iteration()
            backend.synchronize()
            launches = backend.log[first:]
            totals.append(launch_ms(launches) or 0.0)  # 0: untimed (under the profiler)
            rows += [_row(len(rows) + i, r, k, policy) for i, k in enumerate(launches)]
            timed = (
                f", {totals[-1]:.3f} ms of kernel time"
                if getattr(backend, "timed", True)
                else " (untimed: under the profiler)"
            )
            echo(f"iteration {r + 1}/{repeat}: {len(launches)} launches{timed}")
    finally:
        stop()
    return tagged(rows), totals


def _row(invocation: int, repeat: int, k: LaunchRecord, policy: str) -> LoggedLaunch:
    """The LoggedLaunch of a LaunchRecord tagged with its Step."""
    step = k.context
    return LoggedLaunch(
        invocation,
        step.layer.id,
        step.layer.name,
        step.phase,
        repeat,
        k.kernel,
        step.variant,
        policy,
        k.grid,
        k.block,
        k.shared_bytes,
        k.registers,
        k.time_ms,
        start_ns=None if k.start_ms is None else round(k.start_ms * 1e6),
    )


def selftest(cases, policies: tuple[str, ...], echo: Callable[[str], None], tile: Tile | None = None):
    """Every variant of every case (``ops.selftest.network_cases`` or ``small_cases()``) against the
    reference, the GEMM-shaped ones in ``tile`` (None: the default):
    (results, device_info)."""
    from tracker.ops import OPS
    from tracker.ops.gemm import leaves_out
    from tracker.ops.selftest import run_case

    results, device = [], None
    for policy in policies:
        backend, device = open_cupy_backend(policy)
        for case in cases:
            for variant, v in OPS[case.op].variants.items():
                if tile is not None and any(leaves_out(launch, tile) for launch in v.launches.values()):
                    echo(
                        f"{policy} {case.layer} {variant}: skipped, {tile.label} "
                        "leaves no room for the ReLU mask's ring"
                    )
                    continue
                echo(f"{policy} {case.layer} {variant}")
                results += [(policy, r) for r in run_case(backend, case, variant, tile=tile)]
    return results, device


def summarize(results) -> list[dict]:
    finite = lambda value: value if math.isfinite(value) else None  # noqa: E731  (never written: JSON null)
    return [
        {
            "l1": policy,
            "layer": r.layer,
            "op": r.op,
            "variant": r.variant,
            "phase": r.phase,
            "output": r.output,
            "error": finite(r.error),
            "max_error": finite(r.max_error),
            "mean_error": finite(r.mean_error),
            "tolerance": r.tolerance,
            "passed": r.passed,
        }
        for policy, r in results
    ]
