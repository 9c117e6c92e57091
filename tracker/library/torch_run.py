"""The library arm on a GPU: pass 1 (every kernel PyTorch's libraries launch, timed by CUPTI
through ``torch.profiler``) and pass 2's child (the same step under a collector).

Each layer phase runs inside a ``record_function`` range, which the profiler's trace keeps, and
an NVTX range of the same name, which Nsight Compute reads: ``layer/phase``, as our kernels'
launches are named. Warm-up iterations run first (cuDNN picks its algorithms and cuBLAS its
kernels there); the measured ones run between cudaProfilerStart/Stop in the child, as ours do.

Pass 1 runs in a child process too (``python -m tracker.library.torch_run``), which ends with
``os._exit`` once its trace is written: PyTorch's profiler can free activity buffers that CUPTI
still writes into as it tears down (pytorch/pytorch#195207, #195471), and the heap corruption
aborts the process afterwards ('double free or corruption': a library experiment aborted so after
storing both arms, tests/data/gpu-2026-11-26-h200/README.md); in a child the abort cannot reach
the store, nor the arms an experiment runs after the library's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path

import torch

from tracker.errors import OutOfMemory, ProfilerFailed, TrackerError, first_line
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


def step_of(workload: Workload) -> TorchStep | ModuleStep:
    """Our network built in PyTorch, or the user's own model replayed call by call (--torch)."""
    torch.backends.cudnn.benchmark = workload.cudnn_benchmark
    if is_module_spec(workload.network):
        return ModuleStep(workload.network, "cuda", workload.phases, annotated, workload.tf32, workload.batch)
    return TorchStep(
        workload.net, workload.batch, "cuda", phases=workload.phases, region=annotated, allow_tf32=workload.tf32
    )


def warm_up(step: TorchStep | ModuleStep, warmup: int, echo: Callable[[str], None]) -> None:
    for i in range(warmup):
        echo(f"warm-up {i + 1}/{warmup} (cuDNN and cuBLAS choose their kernels)")
        step.iteration()
    torch.cuda.synchronize()


TRACE, PEAK = "trace.json", "peak_bytes"  # what pass 1's child leaves in its folder
OUT_OF_MEMORY = "out of memory"  # how the child's Error: line says so (OutOfMemory in the parent)


def profile_events(workload: Workload, echo: Callable[[str], None]) -> Measured:
    """Pass 1: the measured iterations under torch.profiler, in a child process, read back as the
    launch log."""
    from tracker.gpu.cupy_backend import device_info

    device = device_info()
    echo(
        f"device: {device['device_name']} (CC {device['compute_capability']}, {device['sm_count']} SMs), "
        f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}"
    )
    with tempfile.TemporaryDirectory(prefix="tracker-torch-") as tmp:
        run_child_process([sys.executable, "-m", __name__, workload.to_json(), tmp], echo)
        peak = int((Path(tmp) / PEAK).read_text())
        launches, outside = kineto.launch_log(
            kineto.device_work(kineto.load(Path(tmp) / TRACE)), workload.net, workload.implementation
        )
    if outside:
        names = sorted({k.name[:60] for k in outside})
        echo(
            f"{len(outside)} kernels or copies ran outside every layer phase's range and are not stored: "
            f"{', '.join(names)}"
        )
    idle = kineto.without_kernels(launches, workload.net, workload.phases, workload.repeat)
    if idle:
        echo(
            f"{len(idle)} layer phases launched no kernel and no copy (PyTorch ran them as views, or not at "
            f"all): they take no time: {', '.join(idle)}"
        )
    echo(f"{len(launches)} launches in {workload.repeat} iterations")
    return Measured(launches, device, peak)


def run_child_process(cmd: list[str], echo: Callable[[str], None]) -> None:
    """Run pass 1's child, echoing its output line by line. Its ``Error:`` line is raised as the
    one-line error it was; any other failure names its exit status and last line. Interrupted
    here, it stops the child (in a process group of its own, as the profilers are)."""
    from tracker import processes

    lines: list[str] = []
    with processes.start(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1) as proc:
        assert proc.stdout is not None  # stdout=PIPE
        try:
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                if not lines[-1].startswith("Error: "):  # raised below, said once
                    echo(lines[-1])
        except BaseException:
            processes.stop(proc)
            raise
    if proc.returncode == 0:
        return
    error = next((line for line in reversed(lines) if line.startswith("Error: ")), None)
    if error:
        message = error.removeprefix("Error: ")
        raise (OutOfMemory if message.startswith(OUT_OF_MEMORY) else TrackerError)(message)
    tail = next((line.strip() for line in reversed(lines) if line.strip()), "no output")
    raise ProfilerFailed(f"PyTorch's profile (pass 1) exited with status {proc.returncode}: {tail}")


def trace(workload: Workload, path: str | Path, echo: Callable[[str], None]) -> int:
    """Warm up, then the measured iterations under torch.profiler, its Chrome trace written to
    ``path``; the peak of allocated device memory."""
    from torch.profiler import ProfilerActivity, profile

    step = step_of(workload)
    warm_up(step, workload.warmup, echo)
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
    step = step_of(workload)
    warm_up(step, workload.warmup, lambda line: print(line, file=sys.stderr))
    torch.cuda.profiler.start()
    try:
        for _ in range(workload.repeat):
            step.iteration()
        torch.cuda.synchronize()
    finally:
        torch.cuda.profiler.stop()


def _pass1_child(spec: str, folder: str) -> None:
    """Pass 1's child: the trace and the peak memory written into ``folder``."""

    def work() -> None:
        peak = trace(Workload.from_json(spec), Path(folder) / TRACE, lambda line: print(line, flush=True))
        (Path(folder) / PEAK).write_text(str(peak))

    child_main(work)


def child_main(work: Callable[[], None]) -> None:
    """A child process's body: ``work``, then ``os._exit``, past the teardown that can abort (the
    module's docstring). A TrackerError (or PyTorch's out of memory) becomes its ``Error:`` line,
    for ``run_child_process`` to raise; anything else its traceback."""
    code = 1
    try:
        work()
        code = 0
    except TrackerError as exc:
        print(f"Error: {exc}")
    except torch.cuda.OutOfMemoryError as exc:
        print(f"Error: {OUT_OF_MEMORY}: {first_line(exc)}")
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        import traceback

        traceback.print_exc(file=sys.stdout)
    finally:
        sys.stdout.flush()
        os._exit(code)


if __name__ == "__main__":
    _pass1_child(sys.argv[1], sys.argv[2])
