"""Nsight Compute as pass 2: find it, build its command, run the workload child under it with
progress, say clearly what failed, and export its report as CSV for ``ncu_csv``.

The command (the README's "Pass 2: Nsight Compute"): ``--profile-from-start off`` (only the
iterations between cudaProfilerStart/Stop), the catalog's metrics in one ``--metrics`` list (ncu schedules
the fewest replay passes that cover them), ``--nvtx`` (each launch's layer/phase range),
``--target-processes all`` (the workload is a Python child), and explicit replay mode, cache
control and clock control, all recorded on the run. The report is exported twice with
``ncu --import``: once with kernel names and every metric, once with ``--print-nvtx-rename
kernel`` for each launch's innermost NVTX range, so that the join can check both.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from glob import glob
from pathlib import Path

from tracker import processes
from tracker.errors import BackendUnavailable, NcuFailed, unknown
from tracker.metrics import WARP_STATES, Source, Sources

CACHE_CONTROL = ("all", "none")
CLOCK_CONTROL = ("base", "none")
REPLAY_MODES = ("kernel", "application")
_PROGRESS = re.compile(r'==PROF== Profiling "(?P<kernel>[^"]+)"(?: - (?P<id>\d+))?:(?:.* - (?P<passes>\d+) pass)?')
PERMISSION_HELP = (
    "the driver restricts GPU performance counters to administrators (ERR_NVGPUCTRPERM). Run as root "
    "or with CAP_SYS_ADMIN (CAP_PERFMON from driver R565), start a container with --cap-add=SYS_ADMIN, or "
    "allow all users: put 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' in /etc/modprobe.d/, "
    "rebuild the initramfs and reboot ('grep RmProfilingAdminOnly /proc/driver/nvidia/params' shows 1 "
    "while restricted). Or profile with --backend events"
)


def _warp_state(metric: str) -> Source:
    """A stall reason as ncu names it: warps in that state per issue-active cycle (Hopper adds gmma)."""
    reason = metric.removeprefix("stall_")
    return Source(
        metric,
        f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio",
        min_cc=9.0 if reason == "gmma" else 0.0,
    )


S = Source
# ncu's name for each catalog metric it collects (sm_70 and newer), from NVIDIA's Profiling Guide and
# its nvprof-to-ncu "Metric Comparison" table; the sm_86 and sm_90 names are checked in tests against
# real ``ncu --query-metrics`` listings (tests/data/ncu/SOURCES.md).
SOURCES = Sources(
    "ncu",
    (
        S("duration_ns", "gpu__time_duration.sum"),
        S("cycles_elapsed", "sm__cycles_elapsed.avg"),
        S("sm_active_cycles", "sm__cycles_active.avg"),
        S("sm_clock_hz", "sm__cycles_elapsed.avg.per_second"),
        S("dram_clock_hz", "dram__cycles_elapsed.avg.per_second"),
        S("l2_clock_hz", "lts__cycles_elapsed.avg.per_second"),
        S("l1_clock_hz", "l1tex__cycles_elapsed.avg.per_second"),
        S("fadd", "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"),
        S("fmul", "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum"),
        S("ffma", "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"),
        S("fp32_inst", "smsp__sass_thread_inst_executed_op_fp32_pred_on.sum"),
        S("instructions", "smsp__inst_executed.sum"),
        *(_warp_state(m.name) for m in WARP_STATES),
        S("stall_selected", "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio"),
        S("warps_per_issue", "smsp__average_warps_active_per_issue_active.ratio"),
        S("l1_hit_rate", "l1tex__t_sector_hit_rate.pct"),
        S("l1_global_load_hit_rate", "l1tex__t_sector_pipe_lsu_mem_global_op_ld_hit_rate.pct"),
        S("l2_hit_rate", "lts__t_sector_hit_rate.pct"),
        S("l2_read_hit_rate", "lts__t_sector_op_read_hit_rate.pct"),
        S("l2_write_hit_rate", "lts__t_sector_op_write_hit_rate.pct"),
        S("l1_global_load_requests", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"),
        S("l1_global_load_sectors", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
        S("l1_global_store_requests", "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"),
        S("l1_global_store_sectors", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"),
        S("l1_local_load_sectors", "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum"),
        S("l1_local_store_sectors", "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum"),
        S("l1_requests", "l1tex__t_requests.sum"),
        S("l1_sectors", "l1tex__t_sectors.sum"),
        S("l1_bytes", "l1tex__t_bytes.sum"),
        S("shared_load_wavefronts", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"),
        S("shared_store_wavefronts", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"),
        S("shared_load_bank_conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"),
        S("shared_store_bank_conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
        S("shared_bytes", "smsp__sass_data_bytes_mem_shared.sum"),
        S("l2_read_sectors", "lts__t_sectors_op_read.sum"),
        S("l2_write_sectors", "lts__t_sectors_op_write.sum"),
        S("l2_sectors", "lts__t_sectors.sum"),
        S("l2_bytes", "lts__t_bytes.sum"),
        S("l2_to_l1_read_bytes", "l1tex__m_xbar2l1tex_read_bytes.sum"),
        S("l1_to_l2_write_bytes", "l1tex__m_l1tex2xbar_write_bytes.sum"),
        S("dram_read_sectors", "dram__sectors_read.sum"),
        S("dram_write_sectors", "dram__sectors_write.sum"),
        S("dram_read_bytes", "dram__bytes_read.sum"),
        S("dram_write_bytes", "dram__bytes_write.sum"),
        S("l1_lg_writeback_cycles", "l1tex__lsu_writeback_active_mem_lg.sum", min_cc=7.5, max_cc=8.9),
        S("sm_throughput_pct", "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        S("memory_throughput_pct", "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
        S("l1_throughput_pct", "l1tex__throughput.avg.pct_of_peak_sustained_active"),
        S("shared_throughput_pct", "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed"),
        S("l2_throughput_pct", "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
        S("dram_throughput_pct", "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
        S("achieved_occupancy", "sm__warps_active.avg.pct_of_peak_sustained_active"),
        S("sm_efficiency", "smsp__cycles_active.avg.pct_of_peak_sustained_elapsed"),
        S("ipc", "sm__inst_executed.avg.per_cycle_active"),
        S("issue_slot_pct", "smsp__issue_active.avg.pct_of_peak_sustained_active"),
        S("eligible_warps", "smsp__warps_eligible.avg.per_cycle_active"),
        S("warp_execution_efficiency", "smsp__thread_inst_executed_per_inst_executed.ratio", scale=3.125),
        S("fma_pipe_pct", "smsp__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"),
        S("alu_pipe_pct", "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active"),
        S("lsu_pipe_pct", "smsp__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active"),
        S("xu_pipe_pct", "smsp__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"),
        S("ffma_peak_per_cycle", "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained"),
        S("dram_bytes_peak_per_cycle", "dram__bytes.sum.peak_sustained"),
        S("l2_to_l1_bytes_peak_per_cycle", "l1tex__m_xbar2l1tex_read_bytes.sum.peak_sustained"),
        S(
            "l1_lg_writeback_peak_per_cycle",
            "l1tex__lsu_writeback_active_mem_lg.sum.peak_sustained",
            min_cc=7.5,
            max_cc=8.9,
        ),
        S("replay_passes", "profiler__replayer_passes", requested=False),
    ),
)


@dataclass(frozen=True)
class Settings:
    """How ncu runs pass 2 (--replay-mode, --cache-control, --clock-control), each one of its
    choices above; the CLI's options read the same tuples."""

    replay_mode: str = "kernel"
    cache_control: str = "all"
    clock_control: str = "base"

    def __post_init__(self) -> None:
        for what, value, known in (
            ("ncu replay mode", self.replay_mode, REPLAY_MODES),
            ("ncu cache control", self.cache_control, CACHE_CONTROL),
            ("ncu clock control", self.clock_control, CLOCK_CONTROL),
        ):
            if value not in known:
                raise unknown(what, str(value), list(known))


def find() -> str | None:
    """The ncu executable: $TRACKER_NCU, PATH, then the usual install locations."""
    return first_executable(
        [
            os.environ.get("TRACKER_NCU"),
            *cuda_tool_paths("ncu"),
            *sorted(glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True),
        ]
    )


def find_sanitizer() -> str | None:
    """compute-sanitizer: $TRACKER_SANITIZER, PATH, then the usual install locations."""
    return first_executable(
        [
            os.environ.get("TRACKER_SANITIZER"),
            *cuda_tool_paths("compute-sanitizer"),
            *sorted(glob("/usr/local/cuda*/compute-sanitizer/compute-sanitizer"), reverse=True),
        ]
    )


def cuda_tool_paths(tool: str) -> list[str | None]:
    return [
        shutil.which(tool),
        f"/usr/local/cuda/bin/{tool}",
        *sorted(glob(f"/usr/local/cuda-*/bin/{tool}"), reverse=True),
    ]


def first_executable(candidates: list[str | None]) -> str | None:
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def version(ncu: str) -> str:
    """``2025.3.1.0`` from ``ncu --version``."""
    out = _output([ncu, "--version"], "ncu --version")
    match = re.search(r"Version (\S+)", out)
    if not match:
        raise BackendUnavailable(f"cannot read the version from '{ncu} --version': {out.strip()[:200]}")
    return match.group(1)


def available_metrics(ncu: str) -> set[str]:
    """The base metric names ncu lists for the GPU here (``ncu --query-metrics``)."""
    return parse_query_metrics(_output([ncu, "--query-metrics"], "ncu --query-metrics"))


def parse_query_metrics(text: str) -> set[str]:
    """Base names from a ``--query-metrics`` listing (a table after a dashed rule)."""
    names, in_table = set(), False
    for line in text.splitlines():
        if line.startswith("----"):
            in_table = True
            continue
        word = line.split(" ", 1)[0]
        if in_table and "__" in word:
            names.add(word)
    return names


def command(ncu: str, metrics: list[str], report: Path, program: list[str], settings: Settings) -> list[str]:
    return [
        ncu,
        "--profile-from-start",
        "off",
        "--nvtx",
        "--target-processes",
        "all",
        "--replay-mode",
        settings.replay_mode,
        "--cache-control",
        settings.cache_control,
        "--clock-control",
        settings.clock_control,
        "--metrics",
        ",".join(metrics),
        "--export",
        str(report),
        "--force-overwrite",
        *program,
    ]


@dataclass
class Progress:
    """Pass 2's progress line per profiled launch: launch k of the ``expected``, the time since
    ncu started and, at the pace since the first launch was profiled (ncu's start and the
    child's warm-up, which compiles the kernels, come before it), the time left."""

    expected: int
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)
    first: float | None = field(init=False, default=None)
    done: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def line(self, kernel: str, passes: str | None) -> str:
        now = self.clock()
        self.done += 1
        self.first = now if self.first is None else self.first
        timing = f"{_clock(now - self.started)} elapsed"
        if 1 < self.done < self.expected:
            pace = (now - self.first) / (self.done - 1)
            timing += f", about {_clock(pace * (self.expected - self.done))} left"
        return f"ncu: launch {self.done}/{self.expected} {kernel}{f', {passes} passes' if passes else ''}; {timing}"


def _clock(seconds: float) -> str:
    """'0:42', '3:20', '1:02:05'."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02}:{secs:02}" if hours else f"{minutes}:{secs:02}"


def run(
    cmd: list[str],
    report: Path,
    expected: int,
    echo: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Run ncu, echoing progress per profiled launch; raise NcuFailed with the reason on failure.
    Interrupted (Ctrl-C, SIGTERM) or failing here, it stops ncu and the workload under it."""
    errors: list[str] = []
    lines: list[str] = []
    progress = Progress(expected, clock)
    with processes.start(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1) as proc:
        assert proc.stdout is not None  # stdout=PIPE
        try:
            for line in proc.stdout:
                line = line.rstrip("\n")
                lines.append(line)
                if line.startswith("==ERROR=="):
                    errors.append(line)
                match = _PROGRESS.match(line)
                if match:
                    echo(progress.line(match.group("kernel"), match.group("passes")))
        except BaseException:
            processes.stop(proc)
            raise
    _check(proc.returncode, errors, lines, report)


def _check(code: int, errors: list[str], lines: list[str], report: Path) -> None:
    text = "\n".join(errors)
    _permission(text)
    if errors:
        raise NcuFailed(f"ncu failed: {errors[0].removeprefix('==ERROR==').strip()}")
    if code != 0:
        tail = next((line for line in reversed(lines) if line.strip()), "no output")
        raise NcuFailed(f"ncu exited with status {code}: {tail.strip()}")
    if not report.exists() or report.stat().st_size == 0:
        raise NcuFailed(f"ncu finished but wrote no report at {report} (output truncated?)")


def export(ncu: str, report: Path, nvtx_names: bool = False) -> str:
    """The report as raw-page CSV in base units (``ncu --import``); with ``nvtx_names`` each
    launch is named by its innermost NVTX range instead of its kernel."""
    cmd = [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]
    if nvtx_names:
        cmd += ["--print-nvtx-rename", "kernel"]
    return _output(cmd, f"ncu --import {report.name}")


def _output(cmd: list[str], what: str) -> str:
    return processes.output(cmd, what, NcuFailed, _permission).stdout


def _permission(output: str) -> None:
    if "ERR_NVGPUCTRPERM" in output:
        raise BackendUnavailable(f"ncu cannot read counters: {PERMISSION_HELP}")
