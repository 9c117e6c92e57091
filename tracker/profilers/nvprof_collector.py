"""Pass 2 with nvprof, for the GPUs Nsight Compute does not support (compute capability < 7.0:
paper 003's K40 and GTX 1080).

The same child workload as ncu's, between cudaProfilerStart/Stop (``--profile-from-start off``),
with the catalog's nvprof metric names (those ``nvprof --query-metrics`` lists for the GPU) on
its per-launch GPU trace (``--print-gpu-trace --csv --metrics``), parsed by
tracker/profilers/nvprof.py and joined by invocation order with the kernel-name check. nvprof's
trace does not name NVTX ranges, so the join checks names only.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tracker import processes
from tracker.errors import BackendUnavailable, ProfilerFailed
from tracker.profilers import Counters, Options, Profiled, ncu, nvprof
from tracker.profilers.join import join

SOURCES = nvprof.SOURCES  # what this collector calls the catalog's metrics

if TYPE_CHECKING:
    from tracker.gpu.workload import LoggedLaunch

FIRST_UNSUPPORTED_CC = 8.0  # nvprof does not profile Ampere and newer
TIMEOUT_S = 3600  # replaying every launch once per metric group is slow on an old GPU


def supports(compute_capability: float) -> bool:
    """auto's choice below Volta; asked for by name it runs up to Turing."""
    return compute_capability < 7.0


def find(options: Options) -> NvprofCollector:
    path = ncu.first_executable([os.environ.get("TRACKER_NVPROF"), *ncu.cuda_tool_paths("nvprof")])
    if path is None:
        raise BackendUnavailable(
            "nvprof was not found on PATH, in $TRACKER_NVPROF or under /usr/local/cuda (CUDA 10.2 and 11.x ship it)"
        )
    out = _output([path, "--version"], "nvprof --version")
    match = re.search(r"[Rr]elease version (\S+)|V(\d+\.\d+\.\d+)", out)
    if not match:
        raise BackendUnavailable(f"cannot read the version from '{path} --version': {out.strip()[:200]}")
    return NvprofCollector(path, match.group(1) or match.group(2), options.keep_report)


@dataclass(frozen=True)
class NvprofCollector:
    path: str
    version: str
    keep_report: str | None = None  # where to keep nvprof's CSV log
    name: str = "nvprof"

    def describe(self) -> str:
        return f"nvprof {self.version} at {self.path}"

    def collect(
        self, target: Profiled, launches: Sequence[LoggedLaunch], compute_capability: float, echo: Callable[[str], None]
    ) -> Counters:
        if compute_capability >= FIRST_UNSUPPORTED_CC:
            raise BackendUnavailable(
                f"nvprof does not profile compute capability {compute_capability} (Ampere and newer): use --backend ncu"
            )
        known = nvprof.parse_query_metrics(_output([self.path, "--query-metrics"], "nvprof --query-metrics"))
        metrics = [m for m in nvprof.metric_names() if m in known]
        skipped = [nvprof.SOURCES.by_name[m].metric for m in nvprof.metric_names() if m not in known]
        if skipped:
            echo(
                f"nvprof {self.version} does not know {len(skipped)} catalog metrics on this GPU: {', '.join(skipped)}"
            )
        echo(
            f"pass 2: nvprof {self.version}, {len(metrics)} metrics, {len(launches)} launches to profile "
            "(nvprof prints no progress per launch)"
        )
        with tempfile.TemporaryDirectory(prefix="tracker-nvprof-") as tmp:
            log = Path(tmp) / "pass2.csv"
            _run(nvprof.command(target.command(), metrics, str(log), self.path), log)
            profiled = nvprof.parse_trace(log.read_text(errors="replace"), "nvprof's GPU trace")
            if self.keep_report:
                shutil.copyfile(log, self.keep_report)
                echo(f"nvprof log kept at {self.keep_report}")
        echo(f"nvprof profiled {len(profiled)} launches")
        rows = join(launches, profiled, None)
        return Counters(
            rows, dict(collector_version=self.version), nvprof.SOURCES.names({row["name"] for row in rows}), skipped
        )


def _run(cmd: list[str], log: Path) -> None:
    """nvprof in a process group of its own (``processes.start``), stopped with its workload when it
    runs too long or tracker is interrupted."""
    with processes.start(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        try:
            out, err = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            processes.stop(proc)
            raise ProfilerFailed(f"nvprof did not finish in {TIMEOUT_S // 60} minutes") from None
        except BaseException:
            processes.stop(proc)
            raise
    _check(proc.returncode, out + err, log)


def _check(code: int, output: str, log: Path) -> None:
    if "ERR_NVGPUCTRPERM" in output:
        raise BackendUnavailable(f"nvprof cannot read counters: {ncu.PERMISSION_HELP}")
    errors = [line for line in output.splitlines() if "==ERROR==" in line or line.startswith("======== Error")]
    if errors:
        raise ProfilerFailed(f"nvprof failed: {errors[0].split('==ERROR==')[-1].strip()}")
    if code != 0:
        tail = next((line for line in reversed(output.splitlines()) if line.strip()), "no output")
        raise ProfilerFailed(f"nvprof exited with status {code}: {tail.strip()}")
    if not log.exists() or log.stat().st_size == 0:
        raise ProfilerFailed(f"nvprof finished but wrote no log at {log}")


def _output(cmd: list[str], what: str) -> str:
    done = processes.output(cmd, what)
    return done.stdout + done.stderr  # nvprof writes its listings to stderr
