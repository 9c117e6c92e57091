"""Running ncu: a stand-in executable plays ncu's part, to test the process handling,
the exports and how a failed join marks the run."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from profiler_samples import DATA, SAMPLE, Logged
from samples import profiled

from tracker import processes
from tracker.errors import BackendUnavailable, JoinError
from tracker.profilers import ncu, ncu_csv
from tracker.profilers.join import kernel_base

# --- running ncu (a stand-in executable plays ncu's part: these test our process handling) ------


def _stand_in(tmp_path: Path, script: str) -> str:
    path = tmp_path / "ncu"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_permission_error_says_how_to_fix_it(tmp_path):
    fake = _stand_in(
        tmp_path,
        "echo '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access "
        "NVIDIA GPU Performance Counters on the target device 0.'\nexit 1\n",
    )
    with pytest.raises(BackendUnavailable, match="NVreg_RestrictProfilingToAdminUsers=0"):
        ncu.run([fake], tmp_path / "r.ncu-rep", 1, lambda line: None)


def test_child_failure_and_missing_report(tmp_path):
    fake = _stand_in(tmp_path, "echo '==ERROR== The application returned an error code (1).'\nexit 1\n")
    with pytest.raises(ncu.NcuFailed, match=r"ncu failed: The application returned an error code \(1\)"):
        ncu.run([fake], tmp_path / "r.ncu-rep", 1, lambda line: None)
    fake = _stand_in(tmp_path, "echo done\n")
    with pytest.raises(ncu.NcuFailed, match="wrote no report"):
        ncu.run([fake], tmp_path / "r.ncu-rep", 1, lambda line: None)


def test_progress_per_profiled_launch(tmp_path):
    """Launch k of those to profile, the time since ncu started and, at the pace since the first
    launch (ncu's start and the child's warm-up come before it), the time left."""
    report = tmp_path / "r.ncu-rep"
    fake = _stand_in(
        tmp_path,
        f"""echo '==PROF== Connected to process 1'
echo '==PROF== Profiling "conv2d_fwd_shared" - 0: 0%....50%....100% - 18 passes'
echo '==PROF== Profiling "relu_fwd" - 1: 0%....50%....100% - 18 passes'
echo '==PROF== Profiling "lrn_fwd" - 2: 0%....50%....100% - 18 passes'
echo '==PROF== Profiling "gemm_nt" - 3: 0%....50%....100%'
echo report > {report}
""",
    )
    ticks = iter([0.0, 40.0, 42.5, 45.0, 3640.0])  # ncu's start, then each launch profiled
    lines = []
    ncu.run([fake], report, 68, lines.append, clock=lambda: next(ticks))
    assert lines == [
        "ncu: launch 1/68 conv2d_fwd_shared, 18 passes; 0:40 elapsed",
        "ncu: launch 2/68 relu_fwd, 18 passes; 0:42 elapsed, about 2:45 left",
        "ncu: launch 3/68 lrn_fwd, 18 passes; 0:45 elapsed, about 2:42 left",
        "ncu: launch 4/68 gemm_nt; 1:00:40 elapsed, about 21:20:00 left",
    ]


def test_an_interrupted_ncu_is_stopped_with_the_workload_under_it(tmp_path):
    """Ctrl-C or SIGTERM while ncu profiles (here: raised where the progress is echoed) stops ncu
    and the workload it started, in its own process group, rather than leaving them holding the
    GPU; the interruption goes on up to mark the run."""
    import time

    pids = tmp_path / "pids"
    fake = _stand_in(
        tmp_path,
        f"""sleep 60 &
echo $$ $! > {pids}
echo '==PROF== Profiling "conv2d_fwd_shared" - 0: 0%....50%....100% - 18 passes'
wait
""",
    )

    def interrupted(line):
        raise KeyboardInterrupt

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        ncu.run([fake], tmp_path / "r.ncu-rep", 68, interrupted)
    assert time.monotonic() - started < processes.STOP_GRACE_S
    for pid in map(int, pids.read_text().split()):  # ncu, and the workload it runs
        assert gone(pid)


def gone(pid: int, within_s: float = 5.0) -> bool:
    """Whether ``pid`` ends within ``within_s``: a killed process still runs its exit on a CPU,
    which a loaded machine may give it only later (CI saw the workload alive at once, 2026-11-25)."""
    import time

    deadline = time.monotonic() + within_s
    while running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for an init that may never reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_command_records_every_choice():
    cmd = ncu.command("ncu", ["a.sum", "b.ratio"], Path("/tmp/r"), ["python", "-m", "w"], ncu.Settings())
    for flag, value in (
        ("--profile-from-start", "off"),
        ("--replay-mode", "kernel"),
        ("--cache-control", "all"),
        ("--clock-control", "base"),
        ("--target-processes", "all"),
        ("--metrics", "a.sum,b.ratio"),
    ):
        assert cmd[cmd.index(flag) + 1] == value
    assert "--nvtx" in cmd and cmd[-3:] == ["python", "-m", "w"]


def test_ncu_is_found_through_the_environment(tmp_path, monkeypatch):
    fake = _stand_in(
        tmp_path,
        "echo 'NVIDIA (R) Nsight Compute Command Line Profiler'\n"
        "echo 'Version 2025.3.1.0 (build 36398880) (public-release)'\n",
    )
    monkeypatch.setenv("TRACKER_NCU", fake)
    assert ncu.find() == fake and ncu.version(fake) == "2025.3.1.0"


@pytest.mark.skipif(ncu.find() is None or not os.access(DATA, os.R_OK), reason="needs Nsight Compute (ncu)")
def test_the_real_report_exports_and_parses():
    """The .ncu-rep sample through `ncu --import` (needs ncu, not a GPU): the same 8 launches as its CSV."""
    text = ncu.export(ncu.find(), DATA / "ncu-report-v100-ncu2020.1-nvtx-dram.ncu-rep")
    launches = ncu_csv.parse(text)
    assert [launch.kernel for launch in launches] == [launch.kernel for launch in ncu_csv.parse(SAMPLE)]


def _stand_in_ncu(tmp_path, monkeypatch, refuse_clocks: bool = False):
    """A stand-in ncu answering with real output: the sm_86 metric listing for --query-metrics and
    the V100 sample for both exports of the report; it logs its calls. (log, pass-1 launches)"""
    log = tmp_path / "calls"
    refusal = (
        '  *"--clock-control base"*) echo \'==ERROR== Failed to lock GPU clocks to base: insufficient '
        "permissions'; exit 1;;\n"
        if refuse_clocks
        else ""
    )
    fake = _stand_in(
        tmp_path,
        f"""echo "$@" >> {log}
case "$*" in
  *--version*) echo 'Version 2025.3.1.0 (build 1)';;
  *--query-metrics*) cat {DATA / "ncu-query-metrics-rtx3080-sm86.txt"};;
  *--import*) cat {DATA / "ncu-details-v100-ncu2020.1-nvtx-dram.csv"};;
{refusal}  *) for a in "$@"; do [ "$prev" = --export ] && echo rep > "$a"; prev=$a; done;;
esac
""",
    )
    monkeypatch.setenv("TRACKER_NCU", fake)
    profiled = ncu_csv.parse(SAMPLE)
    return log, [
        Logged(invocation=i, kernel_name=kernel_base(p.kernel), range=p.kernel) for i, p in enumerate(profiled)
    ]


def test_collect_runs_ncu_exports_twice_and_joins(tmp_path, monkeypatch):
    """Pass 2's orchestration, with the stand-in ncu."""
    from tracker.gpu.workload import Workload
    from tracker.profilers import Options, find

    log, launches = _stand_in_ncu(tmp_path, monkeypatch)
    lines = []
    kept = tmp_path / "kept.ncu-rep"
    collector = find("ncu", Options(ncu.Settings(), str(kept)))
    counters = collector.collect(profiled(Workload("alexnet", batch=2)), launches, 9.0, lines.append)
    assert kept.read_text() == "rep\n"
    assert counters.run_fields == dict(
        collector_version="2025.3.1.0",
        collector_settings=dict(replay_mode="kernel", cache_control="all", clock_control="base"),
    )
    assert counters.sources == {
        "cycles_elapsed": "sm__cycles_elapsed.avg",
        "sm_clock_hz": "sm__cycles_elapsed.avg.per_second",
    }  # ncu's names of what it stored
    assert "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio" in counters.skipped  # not on sm_86
    assert {r["name"] for r in counters.rows} == {"cycles_elapsed", "sm_clock_hz"}
    calls = log.read_text().splitlines()
    profile_call = next(c for c in calls if "--export" in c)
    assert "-m tracker.implementations.child profiled" in profile_call and "gmma" not in profile_call
    assert sum("--import" in c for c in calls) == 2 and any("--print-nvtx-rename kernel" in c for c in calls)


def test_clocks_that_cannot_be_locked_fall_back_to_clock_control_none(tmp_path, monkeypatch):
    """A stand-in ncu that refuses to lock the clocks: pass 2 runs again with --clock-control none,
    records it, and says why; the user's --cache-control reaches ncu's command line."""
    from tracker.gpu.workload import Workload
    from tracker.profilers import Options, find

    log, launches = _stand_in_ncu(tmp_path, monkeypatch, refuse_clocks=True)
    lines = []
    collector = find("ncu", Options(ncu.Settings(cache_control="none")))
    counters = collector.collect(profiled(Workload("alexnet", batch=2)), launches, 9.0, lines.append)
    assert counters.run_fields["collector_settings"] | {"replay_mode": "kernel"} == dict(
        replay_mode="kernel", clock_control="none", cache_control="none"
    )
    assert counters.note.startswith("clock control none: ncu could not lock the clocks at base (ncu failed: Failed")
    profiled_calls = [c for c in log.read_text().splitlines() if "--export" in c]
    assert ["--clock-control base" in c for c in profiled_calls] == [True, False]
    assert all("--cache-control none" in c for c in profiled_calls)
    assert any("profiling again with --clock-control none" in line for line in lines)


def test_a_failed_join_marks_the_run_and_stores_no_counter(tmp_path, monkeypatch):
    """The ncu path of `tracker profile` with both passes stood in (pass 1 needs a GPU): the
    run's row exists from the start, the join's failure marks it failed with the reason, pass
    1's launch stays with its time, and no counter is stored."""
    import tracker.gpu.runner
    import tracker.profile
    from tracker.gpu.runner import Measured
    from tracker.gpu.workload import LoggedLaunch
    from tracker.nets import build
    from tracker.profile import Choice, profile
    from tracker.store import open_store, run_sql

    row = LoggedLaunch(
        invocation=0,
        layer_id=1,
        layer="conv1",
        phase="fwd",
        repeat=0,
        kernel_name="conv2d_fwd_shared",
        variant="shared",
        l1_policy="ca",
        grid=(1, 1, 1),
        block=(256, 1, 1),
        shared_bytes=0,
        registers=32,
        time_ms=1.0,
    )
    device = dict(device_name="stand-in", compute_capability="9.0", sm_count=132)
    seen = {}

    class Joining:
        name, version = "ncu", "2025.3.1.0"

        def collect(self, workload, launches, cc, echo):
            seen.update(launches=launches, cc=cc)
            raise JoinError("invocation 0 (conv1/fwd, conv2d_fwd_shared): pass 2 profiled kernel 'relu_fwd' there")

    monkeypatch.setattr(
        tracker.profile,
        "choose_backend",
        lambda requested, options, implementations=(): Choice("ncu", "asked for with --backend ncu", Joining()),
    )
    monkeypatch.setattr(tracker.gpu.runner, "profile_events", lambda *args: Measured([row], device, 0))
    db = str(tmp_path / "t.db")
    with pytest.raises(JoinError):
        profile(db, build("alexnet"), 2, backend="ncu", repeat=1)
    assert seen["launches"][0].range == "conv1/fwd" and seen["cc"] == 9.0
    store = open_store(db, write=False)
    ((status, error),) = run_sql(store, "SELECT status, error FROM run")[1]
    assert status == "failed" and "invocation 0 (conv1/fwd" in error
    assert run_sql(store, "SELECT invocation, time_ms FROM launch")[1] == [(0, 1.0)]
    assert run_sql(store, "SELECT COUNT(*), MAX(counter_iterations) FROM metric, run")[1] == [(0, None)]
