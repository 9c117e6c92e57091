"""Pass 2's collectors as one protocol, and the one Workload that reaches the child.

nvprof cannot run here (no GPU before Volta, no nvprof): ``tests/nvprof_stand_in.py`` plays it,
answering from the public K20c samples (a GPU trace of 12 launches of four kernels, and their
metrics), so these tests drive our process handling, parsing, catalog mapping and join on real
nvprof output. The launch log they join onto is written to match that recording.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from samples import profiled

import tracker.profile
from tracker.errors import BackendUnavailable, JoinError, ProfilerFailed, TrackerError
from tracker.gpu import detect
from tracker.gpu.workload import LoggedLaunch, Workload
from tracker.profilers import COLLECTORS, Options, find, for_device

HERE = Path(__file__).parent
K20C_KERNELS = [f"__kernel___forma_kernel__{i}__" for i in range(4)]
K20C_MS = [
    7.922282,
    7.943147,
    7.954091,
    7.950571,
    7.924363,
    7.942474,
    7.948875,
    7.951339,
    7.924203,
    7.939818,
    7.950507,
    7.946603,
]  # the trace's Duration column, launch by launch
FLOPS_K0 = 673384360  # flop_count_sp of forma_kernel__0__ in the metric sample


@pytest.fixture
def nvprof(tmp_path, monkeypatch) -> Path:
    """The stand-in on $TRACKER_NVPROF; its calls are logged to the returned path."""
    exe = tmp_path / "nvprof"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {HERE / "nvprof_stand_in.py"} "$@"\n')
    exe.chmod(0o755)
    log = tmp_path / "calls"
    monkeypatch.setenv("TRACKER_NVPROF", str(exe))
    monkeypatch.setenv("STAND_IN_LOG", str(log))
    return log


def k20c_launches(layers=("conv1", "relu1", "lrn1", "pool1")) -> list[LoggedLaunch]:
    """Pass 1's log as it would be for the recorded program: three iterations of four launches,
    timed as the trace timed them."""
    return [
        LoggedLaunch(
            invocation=4 * repeat + i,
            layer_id=i + 1,
            layer=layers[i],
            phase="fwd",
            repeat=repeat,
            kernel_name=K20C_KERNELS[i],
            variant="global",
            l1_policy="ca",
            grid=(257, 257, 1),
            block=(32, 32, 1),
            shared_bytes=0,
            registers=16,
            time_ms=K20C_MS[4 * repeat + i],
        )
        for repeat in range(3)
        for i in range(4)
    ]


K20C = Workload("alexnet", batch=1, repeat=3)  # the recorded program's three iterations, all profiled


def test_the_nvprof_collector_joins_the_k20c_trace_launch_by_launch(nvprof):
    collector = find("nvprof")
    assert (collector.name, collector.version) == ("nvprof", "10.2.89")
    said: list[str] = []
    counters = collector.collect(profiled(K20C), k20c_launches(), 3.5, said.append)
    values = {(r["invocation"], r["name"]): r["value"] for r in counters.rows}
    assert {i for i, _ in values} == set(range(12))
    assert [values[i, "duration_ns"] for i in range(12)] == pytest.approx([ms * 1e6 for ms in K20C_MS])
    assert [values[i, "fp32_flops"] for i in (0, 4, 8)] == [FLOPS_K0] * 3  # the catalog's name for flop_count_sp
    assert values[0, "warp_execution_efficiency"] is not None and (0, "stall_exec_dependency") in values
    assert (0, "stall_long_scoreboard") in values  # nvprof's stall_memory_dependency, under ncu's name
    assert "stall_no_instruction" in counters.skipped  # stall_inst_fetch: not in the K20c listing, not asked for
    assert counters.run_fields == {"collector_version": "10.2.89"}
    assert any("nvprof 10.2.89, 10 metrics, 12 launches" in s for s in said)
    assert counters.sources["stall_long_scoreboard"] == "stall_memory_dependency"  # what nvprof called it
    call = next(c for c in nvprof.read_text().splitlines() if "--log-file" in c)
    options, _, spec = call.partition(" -m tracker.implementations.child profiled ")
    assert options.split()[:5] == [
        "--profile-from-start",
        "off",
        "--print-gpu-trace",
        "--csv",
        "--normalized-time-unit",
    ]
    assert json.loads(spec)["network"] == "alexnet"  # the child: the same workload as pass 1's
    metrics = options.split()[options.split().index("--metrics") + 1].split(",")
    assert len(metrics) == 10 and "stall_sync" in metrics and "stall_inst_fetch" not in metrics


def test_the_join_refuses_a_k20c_trace_that_is_not_pass_1s(nvprof):
    collector, workload = find("nvprof"), K20C
    launches = k20c_launches()
    swapped = launches[:5] + [launches[6], launches[5]] + launches[7:]
    with pytest.raises(
        JoinError,
        match=r"^invocation 6 \(lrn1/fwd, __kernel___forma_kernel__2__\): pass 2 "
        r"profiled kernel '__kernel___forma_kernel__1__",
    ):
        collector.collect(profiled(workload), swapped, 3.5, lambda line: None)
    with pytest.raises(JoinError, match=r"pass 2 profiled 12 launches, pass 1 logged 8"):
        collector.collect(profiled(workload), launches[:8], 3.5, lambda line: None)


@pytest.mark.parametrize(
    "printed, error, message",
    [
        (
            "==ERROR== The user does not have permission to profile on the target device. ERR_NVGPUCTRPERM",
            BackendUnavailable,
            r"nvprof cannot read counters: the driver restricts",
        ),
        ("==ERROR== Invalid metric name: stall_sleeping", ProfilerFailed, r"^nvprof failed: Invalid metric name"),
        ("Segmentation fault", ProfilerFailed, r"^nvprof exited with status 1: Segmentation fault$"),
    ],
)
def test_nvprof_failures_end_in_one_line(nvprof, monkeypatch, printed, error, message):
    monkeypatch.setenv("STAND_IN_FAIL", printed)
    with pytest.raises(error, match=message):
        find("nvprof").collect(profiled(K20C), k20c_launches(), 3.5, lambda line: None)


def test_a_missing_nvprof_says_where_it_looked(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACKER_NVPROF", str(tmp_path / "none"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("tracker.profilers.ncu.cuda_tool_paths", lambda tool: [])
    with pytest.raises(BackendUnavailable, match=r"nvprof was not found on PATH, in \$TRACKER_NVPROF"):
        find("nvprof")


def test_the_collector_follows_the_compute_capability():
    assert list(COLLECTORS) == ["ncu", "nvprof", "cupti"]  # cupti by name only (tests/test_cupti_collector.py)
    assert [for_device(cc) for cc in (3.5, 6.1, 7.0, 9.0, None)] == ["nvprof", "nvprof", "ncu", "ncu", "ncu"]


@pytest.fixture
def kepler(monkeypatch):
    """A machine with a GPU of compute capability 3.5 (and no ncu)."""
    monkeypatch.setattr(tracker.profile, "require_gpu", lambda what: "1 CUDA device(s)")
    monkeypatch.setattr(detect, "compute_capability", lambda ordinal=0: 3.5)
    monkeypatch.setenv("TRACKER_NCU", "/nonexistent")
    monkeypatch.setattr("tracker.profilers.ncu.find", lambda: None)


def test_auto_chooses_nvprof_before_volta_and_a_named_collector_must_fit_the_gpu(nvprof, kepler, monkeypatch):
    choice = tracker.profile.choose_backend("auto")
    assert choice.backend == "nvprof" and choice.collector is not None
    assert "compute capability 3.5, which Nsight Compute does not support" in choice.reason
    assert "nvprof 10.2.89 at" in choice.reason
    with pytest.raises(
        BackendUnavailable,
        match=r"^ncu does not profile compute capability 3.5: use --backend "
        r"nvprof$",
    ):
        tracker.profile.choose_backend("ncu")
    monkeypatch.setattr(detect, "compute_capability", lambda ordinal=0: 9.0)
    with pytest.raises(BackendUnavailable, match=r"nvprof does not profile compute capability 9.0: use --backend ncu"):
        tracker.profile.choose_backend("nvprof")


K20C_DEVICE = dict(device_name="Tesla K20c", compute_capability="3.5", sm_count=13)


@pytest.fixture
def k20c_pass1(monkeypatch) -> list[Workload]:
    """Pass 1 stood in (it needs a GPU) by the log of the recorded program; the workloads it ran."""
    import tracker.gpu.runner
    from tracker.gpu.runner import Measured

    seen: list[Workload] = []

    def pass1(workload, echo):
        seen.append(workload)
        return Measured(k20c_launches(), K20C_DEVICE, 0)

    monkeypatch.setattr(tracker.gpu.runner, "profile_events", pass1)
    return seen


def child_spec(calls: Path) -> dict:
    """The workload nvprof was asked to profile: the child's JSON spec on its logged command line."""
    call = next(c for c in calls.read_text().splitlines() if "--log-file" in c)
    return json.loads(call.partition(" -m tracker.implementations.child profiled ")[2])


def test_tracker_profile_stores_an_nvprof_run_end_to_end(nvprof, kepler, k20c_pass1, tmp_path):
    """`tracker profile --backend auto` on the stand-in Kepler machine: pass 2 runs the stand-in
    nvprof on the first of the three measured iterations (the default), its four launches joined
    onto pass 1's invocations 0-3; the other two iterations keep their times and carry no
    counters. The run is stored as nvprof's, its counters queryable per layer phase like an ncu
    run's, each over the one iteration that has them while times are over all three."""
    from tracker.nets import build
    from tracker.store import open_store, run_sql

    db, said = str(tmp_path / "k20c.db"), []
    result = tracker.profile.profile(db, build("alexnet"), 1, repeat=3, warmup=0, echo=said.append)
    assert result.backend == "nvprof" and k20c_pass1[0].steps and k20c_pass1[0].repeat == 3
    spec = child_spec(nvprof)
    assert spec["repeat"] == 1 and spec["steps"] == [list(step) for step in k20c_pass1[0].steps]
    assert (
        "pass 2 profiles the first of 3 measured iterations (4 launches; --counter-iterations N sets how many)" in said
    )
    store = open_store(db, write=False)
    ((backend, status, reason, iterations, version),) = run_sql(
        store, "SELECT backend, status, backend_reason, counter_iterations, collector_version FROM run"
    )[1]
    assert (backend, status, iterations, version) == ("nvprof", "complete", 1, "10.2.89") and "nvprof 10.2.89" in reason
    sources = dict(run_sql(store, "SELECT name, source FROM metric_source")[1])
    assert sources["fp32_flops"] == "flop_count_sp" and sources.keys() == {
        name for (name,) in run_sql(store, "SELECT DISTINCT name FROM metric")[1]
    }  # nvprof's name of every metric the run holds
    rows = run_sql(
        store,
        "SELECT k.invocation, l.name, m.value FROM metric m JOIN launch k USING (run_id, invocation) "
        "JOIN layer l ON l.run_id = k.run_id AND l.layer_id = k.layer_id "
        "WHERE m.name = 'fp32_flops' ORDER BY k.invocation",
    )[1]
    assert rows == [(0, "conv1", FLOPS_K0), (1, "relu1", 673384360), (2, "lrn1", 673384360), (3, "pool1", 673384360)]
    assert run_sql(store, "SELECT COUNT(*), SUM(time_ms) FROM launch")[1] == [(12, pytest.approx(sum(K20C_MS)))]
    assert run_sql(store, "SELECT DISTINCT repeats FROM layer_time")[1] == [(3,)]
    assert run_sql(store, "SELECT DISTINCT repeats FROM layer_metric")[1] == [(1,)]
    assert run_sql(store, "SELECT COUNT(*) FROM stall_breakdown WHERE first_reason IS NOT NULL")[1] == [(4,)]


def test_counter_iterations_profiles_more_of_the_measured_iterations(nvprof, kepler, k20c_pass1, tmp_path):
    from tracker.nets import build
    from tracker.store import open_store, run_sql

    db = str(tmp_path / "k20c.db")
    tracker.profile.profile(db, build("alexnet"), 1, repeat=3, warmup=0, counter_iterations=3)
    assert child_spec(nvprof)["repeat"] == 3
    store = open_store(db, write=False)
    assert run_sql(store, "SELECT counter_iterations FROM run")[1] == [(3,)]
    assert run_sql(store, "SELECT COUNT(DISTINCT invocation) FROM metric")[1] == [(12,)]
    assert run_sql(store, "SELECT DISTINCT repeats FROM layer_metric")[1] == [(3,)]


def test_counter_iterations_are_checked_where_they_enter(tmp_path):
    from tracker.nets import build

    db = tmp_path / "t.db"
    with pytest.raises(
        TrackerError,
        match=r"^--counter-iterations 4 exceeds --repeat 3: pass 2 collects counters "
        r"from measured iterations of pass 1$",
    ):
        tracker.profile.profile(str(db), build("alexnet"), 1, repeat=3, counter_iterations=4)
    for bad in (0, 1001, True, 1.5, "2"):
        with pytest.raises(TrackerError, match=r"^counter iterations .* is out of range 1\.\.1000$"):
            Options(iterations=bad)  # type: ignore[arg-type]
    assert not db.exists()


def pass1_kept(db: str, status: str) -> tuple:
    """What the store holds of a run whose pass 2 did not finish: its status and error, then
    whether every launch of pass 1 is there with its time, and how many counters."""
    from tracker.store import open_store, run_sql

    store = open_store(db, write=False)
    ((stored, error, iterations, device),) = run_sql(
        store, "SELECT status, error, counter_iterations, device_name FROM run"
    )[1]
    assert (stored, iterations, device) == (status, None, "Tesla K20c")
    assert run_sql(store, "SELECT COUNT(*) FROM layer")[1] == [(21,)]
    assert run_sql(store, "SELECT invocation, time_ms FROM launch ORDER BY invocation")[1] == list(enumerate(K20C_MS))
    assert run_sql(store, "SELECT DISTINCT repeats FROM layer_time")[1] == [(3,)]
    return error, run_sql(store, "SELECT COUNT(*) FROM metric")[1][0][0]


def test_a_sigterm_in_pass_2_keeps_pass_1_and_the_run_says_it_was_interrupted(
    nvprof, kepler, k20c_pass1, tmp_path, monkeypatch, runner
):
    """H100, 2026-11-25 (7-profile-alexnet-b128-default-head.log): `timeout` ended `tracker
    profile` in pass 2 and the run kept no layer and no launch, though pass 1 had timed five
    iterations. Here the stand-in nvprof sends SIGTERM to tracker and profiles on: the run is
    marked interrupted within seconds (nvprof stopped, not waited for), keeps pass 1's layers,
    launches and times, has no counters, and show, runs and report say so."""
    import csv
    import io
    import time

    from tracker.cli import cli
    from tracker.nets import build

    monkeypatch.setenv("STAND_IN_SIGTERM_PARENT", "1")
    db = str(tmp_path / "k20c.db")
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        tracker.profile.profile(db, build("alexnet"), 1, repeat=3, warmup=0)
    assert time.monotonic() - started < 30  # the stand-in would profile on for 60 s
    assert pass1_kept(db, "interrupted") == ("interrupted (Ctrl-C or SIGTERM)", 0)
    kept = (
        "this run was interrupted (Ctrl-C or SIGTERM) before pass 2 (nvprof) stored its counters: pass 1's 12 "
        "launches and their event times are kept, and it has no counters"
    )
    show = runner.invoke(cli, ["show", "last", "--db", db])
    assert show.exit_code == 0 and f"\n{kept}\n" in show.output and "median (time)" in show.output
    (listed,) = csv.DictReader(io.StringIO(runner.invoke(cli, ["runs", "--db", db, "--format", "csv"]).output))
    assert (listed["status"], listed["launches"], listed["counter_iterations"]) == ("interrupted", "12", "")
    report = runner.invoke(cli, ["report", "last", "--db", db, "--out", str(tmp_path / "r")])
    assert report.exit_code == 0, report.output
    md = (tmp_path / "r" / "report.md").read_text()
    assert "profiled with nvprof, whose pass 2 stored no counters" in md and f"{kept[0].upper()}{kept[1:]}." in md
    assert (tmp_path / "r" / "runtime.svg").exists() and f"\n  {kept}\n" in report.output  # pass 1's times, drawn


def test_a_failed_pass_2_keeps_pass_1_and_the_run_says_why(nvprof, kepler, k20c_pass1, tmp_path, monkeypatch):
    from tracker.nets import build

    monkeypatch.setenv("STAND_IN_FAIL", "==ERROR== Invalid metric name: stall_sleeping")
    db = str(tmp_path / "k20c.db")
    with pytest.raises(ProfilerFailed):
        tracker.profile.profile(db, build("alexnet"), 1, repeat=3, warmup=0)
    assert pass1_kept(db, "failed") == ("ProfilerFailed: nvprof failed: Invalid metric name: stall_sleeping", 0)


def test_a_workload_is_checked_where_it_is_made_and_carries_its_plan(emulator):
    from tracker.gpu.network import PlanRunner, plan
    from tracker.nets import build

    for bad, message in (
        (dict(batch=0), "batch 0 is out of range"),
        (dict(phases="up"), "phases"),
        (dict(variants={"conv": "nope"}), "nope"),
        (dict(repeat=0), "repeat 0 is out of range"),
        (dict(warmup=-1), "warmup -1 is out of range"),
    ):
        with pytest.raises(TrackerError, match=message):
            Workload("alexnet", **{"batch": 1, **bad})
    net = build("alexnet")
    steps = plan(net, {"conv": "fused"}, "fwd")
    workload = Workload.of(net, 2, variants={"conv": "fused"}, phases="fwd").planned(steps, {"conv2/fwd": "64x64x8"})
    assert workload.net is net  # the caller's network, not a second build
    child = Workload.from_json(workload.to_json())
    assert child == workload and child.steps[0] == ("conv1", "fwd", "fused") and len(child.steps) == len(steps)
    with pytest.raises(TrackerError, match="no plan"):
        PlanRunner.of(emulator, Workload("alexnet", batch=1))
    run = PlanRunner.of(emulator, child)
    assert [(s.layer.name, s.phase, s.variant) for s in run.steps] == list(child.steps)
    assert {k: t.label for k, t in run.tiles.items()} == {"conv2/fwd": "64x64x8"}


def test_a_collector_asked_for_by_name_and_missing_says_what_runs_instead(monkeypatch):
    """With a GPU: ncu missing points to events, libcupti missing to ncu (the one line each)."""
    monkeypatch.setattr(tracker.profile, "require_gpu", lambda what: "1 CUDA device(s)")
    monkeypatch.setattr(detect, "compute_capability", lambda ordinal=0: 9.0)
    monkeypatch.setattr("tracker.profilers.ncu.find", lambda: None)
    with pytest.raises(BackendUnavailable, match=r"; use --backend events$"):
        tracker.profile.choose_backend("ncu")
    from tracker.profilers import cupti_range

    def missing():
        raise BackendUnavailable("no usable libcupti (RuntimeError: not found): pip install -e '.[cupti]'")

    monkeypatch.setattr(cupti_range, "library", missing)
    with pytest.raises(BackendUnavailable, match=r"^no usable libcupti .*; use --backend ncu$"):
        tracker.profile.choose_backend("cupti")
