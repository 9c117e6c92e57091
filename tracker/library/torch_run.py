"""The library arm on a GPU: pass 1 (every kernel PyTorch's libraries launch, timed by CUPTI
through ``torch.profiler``) and pass 2's child (the same step under a collector).

Each layer phase runs inside a ``record_function`` range, which the profiler's trace keeps, and
an NVTX range of the same name, which Nsight Compute reads: ``layer/phase``, as our kernels'
launches are named. Warm-up iterations run first (cuDNN picks its algorithms and cuBLAS its
kernels there); the measured ones run between cudaProfilerStart/Stop in the child, as ours do.
"""

from __future__ import annotations

import sys
import tempfile
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Callable

import torch

from tracker.gpu.runner import Measured
from tracker.gpu.workload import Workload, is_module_spec
from tracker.library import kineto
from tracker.library.torch_module import ModuleStep
from tracker.library.torch_net import TorchStep


def annotated(name: str) -> AbstractContextManager:
    """The range around one layer phase: NVTX (for ncu) and record_function (for the trace)."""
    stack = ExitStack()
    stack.enter_context(torch.cuda.nvtx.range(name))
    stack.enter_context(torch.profiler.record_function(name))
    return stack


def _step(workload: Workload) -> TorchStep | ModuleStep:
    """Our network built in PyTorch, or the user's own model replayed call by call (--torch)."""
    torch.backends.cudnn.benchmark = workload.cudnn_benchmark
    if is_module_spec(workload.network):
        return ModuleStep(workload.network, "cuda", workload.phases, annotated, workload.tf32)
    return TorchStep(workload.net, workload.batch, "cuda", phases=workload.phases, region=annotated,
                     allow_tf32=workload.tf32)


def _warm_up(step: TorchStep | ModuleStep, warmup: int, echo: Callable[[str], None]) -> None:
    for i in range(warmup):
        echo(f"warm-up {i + 1}/{warmup} (cuDNN and cuBLAS choose their kernels)")
        step.iteration()
    torch.cuda.synchronize()


def profile_events(workload: Workload, echo: Callable[[str], None]) -> Measured:
    """Pass 1: the measured iterations under torch.profiler, read back as the launch log."""
    from tracker.gpu.cupy_backend import device_info

    device = device_info()
    echo(f"device: {device['device_name']} (CC {device['compute_capability']}, {device['sm_count']} SMs), "
         f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    with tempfile.TemporaryDirectory(prefix="tracker-torch-") as tmp:
        path = Path(tmp) / "trace.json"
        peak = trace(workload, path, echo)
        launches, outside = kineto.launch_log(kineto.kernels(kineto.load(path)), workload.net,
                                              workload.implementation)
    if outside:
        names = sorted({k.name[:60] for k in outside})
        echo(f"{len(outside)} kernels ran outside every layer phase's range and are not stored: {', '.join(names)}")
    echo(f"{len(launches)} launches in {workload.repeat} iterations")
    return Measured(launches, device, peak)


def trace(workload: Workload, path: str | Path, echo: Callable[[str], None]) -> int:
    """Warm up, then the measured iterations under torch.profiler, its Chrome trace written to
    ``path``; the peak of allocated device memory."""
    from torch.profiler import ProfilerActivity, profile

    step = _step(workload)
    _warm_up(step, workload.warmup, echo)
    torch.cuda.reset_peak_memory_stats()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for r in range(workload.repeat):
            step.iteration()
            torch.cuda.synchronize()
            echo(f"iteration {r + 1}/{workload.repeat}")
    prof.export_chrome_trace(str(path))
    return torch.cuda.max_memory_allocated()


def run_child(workload: Workload) -> None:
    """Pass 2's child: warm up, then the measured iterations between cudaProfilerStart/Stop."""
    step = _step(workload)
    _warm_up(step, workload.warmup, lambda line: print(line, file=sys.stderr))
    torch.cuda.profiler.start()
    try:
        for _ in range(workload.repeat):
            step.iteration()
        torch.cuda.synchronize()
    finally:
        torch.cuda.profiler.stop()
