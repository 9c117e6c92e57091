"""The ``events`` backend (pass 1) and the GPU selftest: CuPy runs, everything else plans.

A profile compiles the kernels, runs warm-up iterations, then brackets the measured iterations
with cudaProfilerStart/Stop (so Nsight Compute with --profile-from-start off sees only them),
times every launch with CUDA events and returns the launch log in invocation order (an
iteration's kernel time is tracker/gpu/timing.py's ``launch_ms``). `tracker tune` is
tracker/tune.py's: nothing here imports the layer above (tune, profile, experiment).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from tracker.errors import BackendUnavailable
from tracker.gpu.network import Executor
from tracker.gpu.timing import launch_ms
from tracker.nets import Network

if TYPE_CHECKING:
    from tracker.ops.gemm import Tile


@dataclass(frozen=True)
class Measured:
    launches: list[dict]  # rows of the launch table, without run_id
    device: dict  # device_info()
    peak_bytes: int  # memory-pool high-water mark


def _cupy_backend(l1_policy: str):
    try:
        from tracker.gpu.cupy_backend import CupyBackend, device_info
    except ImportError as exc:
        raise BackendUnavailable(f"the GPU backends need CuPy ({exc}): pip install -e '.[gpu]'") from None
    return CupyBackend(l1_policy), device_info()


def profile_events(net: Network, batch: int, chosen: dict[str, str], phases: str, l1_bypass: bool,
                   repeat: int, warmup: int, echo: Callable[[str], None], tiles: dict[str, str] | None = None) -> Measured:
    import cupy as cp

    policy = "cg" if l1_bypass else "ca"
    backend, device = _cupy_backend(policy)
    echo(f"device: {device['device_name']} (CC {device['compute_capability']}, {device['sm_count']} SMs)")
    run = Executor(backend, net, batch, chosen, phases, tiles=tiles)
    rows, _ = measure(run, repeat, warmup, policy, echo, around=(cp.cuda.profiler.start, cp.cuda.profiler.stop))
    return Measured(rows, device, backend.peak_bytes)


def measure(run: Executor, repeat: int, warmup: int, policy: str, echo: Callable[[str], None],
            around: tuple[Callable, Callable] = (lambda: None, lambda: None)) -> tuple[list[dict], list[float]]:
    """Warm up, then run ``repeat`` measured iterations between ``around`` (cudaProfilerStart/Stop):
    (the launch rows in invocation order, kernel time per iteration)."""
    backend = run.b
    for i in range(warmup):
        echo(f"warm-up {i + 1}/{warmup} (the first compiles the kernels)")
        run.iteration()
        backend.synchronize()
    backend.log.clear()
    rows: list[dict] = []
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
            timed = (f", {totals[-1]:.3f} ms of kernel time" if getattr(backend, "timed", True)
                     else " (untimed: under the profiler)")
            echo(f"iteration {r + 1}/{repeat}: {len(launches)} launches{timed}")
    finally:
        stop()
    return rows, totals


def _row(invocation: int, repeat: int, k, policy: str) -> dict:
    """A launch-table row (without run_id) from a LaunchRecord tagged with its Step."""
    step = k.context
    (grid_x, grid_y, grid_z), (block_x, block_y, block_z) = k.grid, k.block
    return dict(invocation=invocation, layer_id=step.layer.id, phase=step.phase, repeat=repeat,
                kernel_name=k.kernel, variant=step.variant, l1_policy=policy,
                grid_x=grid_x, grid_y=grid_y, grid_z=grid_z, block_x=block_x, block_y=block_y,
                block_z=block_z, shared_bytes=k.shared_bytes, registers=k.registers, time_ms=k.time_ms)


def selftest(cases, policies: tuple[str, ...], echo: Callable[[str], None], tile: Tile | None = None):
    """Every variant of every case (``ops.selftest.network_cases`` or ``small_cases()``) against the
    reference, the GEMM-shaped ones in ``tile`` (None: the default):
    (results, device_info)."""
    from tracker.ops import OPS
    from tracker.ops.selftest import run_case

    results, device = [], None
    for policy in policies:
        backend, device = _cupy_backend(policy)
        for case in cases:
            for variant in OPS[case.op].variants:
                echo(f"{policy} {case.layer} {variant}")
                results += [(policy, r) for r in run_case(backend, case, variant, tile=tile)]
    return results, device


def summarize(results) -> list[dict]:
    return [{"l1": policy, "layer": r.layer, "op": r.op, "variant": r.variant, "phase": r.phase,
             "output": r.output, "error": r.error if math.isfinite(r.error) else None,
             "tolerance": r.tolerance, "passed": r.passed} for policy, r in results]
