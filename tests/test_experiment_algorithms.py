"""`tracker experiment algorithms`: each convolution algorithm we have against the default, per
conv layer phase, on the CPU emulation with made-up times (tests/made_up_times.py: the bookkeeping,
not a GPU's speed): the algorithm each arm really ran, the model's workspace for it, and a stored
library run's choice beside them (the public A100 trace's kernels, as test_library_run feeds)."""

from __future__ import annotations

import pandas as pd
import pytest
from public_trace import SMALL_NET_RANGES, TRACE, rehomed
from samples import tiny_net

from tracker.analysis.experiments import per_algorithm, results, runs
from tracker.experiment import arms, run_experiment
from tracker.gpu.runner import Measured
from tracker.gpu.workload import Workload
from tracker.library import kineto
from tracker.model.algorithms import conv_cost
from tracker.profile import profile_workload
from tracker.store import open_store

pytestmark = pytest.mark.slow


def test_the_arms_are_the_registrys_algorithms_against_the_default():
    assert [(a.label, a.baseline, a.variants) for a in arms("algorithms", 8)] == [
        ("direct (global)", False, {"conv": "global"}),
        ("implicit_gemm (shared)", True, {"conv": "shared"}),
        ("gemm (gemm)", False, {"conv": "gemm"}),
        ("winograd_f2 (winograd)", False, {"conv": "winograd"}),
        ("winograd_f4 (winograd_f4)", False, {"conv": "winograd_f4"}),
        ("fft (fft)", False, {"conv": "fft"}),
    ]


def test_each_arm_says_what_ran_with_its_workspace_and_the_librarys_choice(tmp_path, emulated_events, monkeypatch):
    db = str(tmp_path / "t.db")
    net = tiny_net()

    def library(workload, echo):  # the public trace's cuDNN kernels under our small net's ranges
        launches, _ = kineto.launch_log(
            kineto.kernels(rehomed(kineto.load(TRACE), SMALL_NET_RANGES)), workload.net, "torch"
        )
        return Measured(launches, {"device_name": "CPU emulation (tests/emu)"}, 0)

    monkeypatch.setattr("tracker.library.torch_run.profile_events", library)
    record = {
        "gpu": "CPU emulation (tests/emu)",
        "date": "2026-11-25",
        "file": "made-up.json",
        "variants": {"conv/fwd/winograd": {"passed": True, "layers": {"conv2": {"ca": {"max": 3e-6, "mean": 1e-6}}}}},
    }
    monkeypatch.setattr("tracker.gpu.verified.records", lambda: [record])  # this 'GPU's selftest record
    monkeypatch.setattr("tracker.library.require_torch", lambda what="": None)
    library_run = profile_workload(
        db, Workload.of(net, 1, repeat=2, warmup=0, implementation="torch"), backend="events"
    ).run_id
    best_run = profile_workload(
        db, Workload.of(net, 1, repeat=2, warmup=0, implementation="torch", cudnn_benchmark=True), backend="events"
    ).run_id  # cuDNN's best, newer
    experiment_id = run_experiment(db, "algorithms", net, 1, repeat=2, warmup=0)
    store = open_store(db, write=False)
    assert list(runs(store, experiment_id)["arm"]) == [a.label for a in arms("algorithms", 1)]
    frame = results(store, experiment_id, "algorithms")
    row = lambda arm, layer, phase: frame[(frame.arm == arm) & (frame.layer == layer) & (frame.phase == phase)].iloc[0]  # noqa: E731
    winograd = row("winograd_f2 (winograd)", "conv2", "fwd")
    assert (winograd.algorithm_a, winograd.algorithm_b) == ("implicit_gemm", "winograd_nonfused")
    assert winograd.max_error_b == 3e-6 and pd.isna(row("winograd_f2 (winograd)", "conv1", "fwd").max_error_b)
    assert winograd.workspace_bytes_b == 4 * conv_cost(net.layer("conv2"), "fwd", 1, "winograd_f2").workspace
    f4 = row("winograd_f4 (winograd_f4)", "conv2", "fwd")  # the same kernels' tag, the model's larger tile
    assert f4.workspace_bytes_b == 4 * conv_cost(net.layer("conv2"), "fwd", 1, "winograd_f4").workspace
    assert f4.workspace_bytes_b != winograd.workspace_bytes_b
    assert (
        row("winograd_f2 (winograd)", "conv2", "bwd_weight").algorithm_b == "winograd_nonfused"
    )  # F(3x3,2x2) on dy's 2x2 tiles
    assert (
        row("gemm (gemm)", "conv2", "fwd").workspace_bytes_b
        == 4 * conv_cost(net.layer("conv2"), "fwd", 1, "gemm").workspace
    )
    assert row("direct (global)", "conv1", "fwd").workspace_bytes_b == 0
    assert (winograd.library_run, winograd.library_algorithm) == (library_run, "fft")  # cuDNN's conv2 in the trace
    assert (winograd.library_best_run, winograd.library_best_algorithm) == (
        best_run,
        "fft",
    )  # the heuristic's kept apart
    assert set(frame.layer) <= {"conv1", "conv2", "iteration"}
    from tracker.report import report  # and its report, from the same store

    report(store, f"e{experiment_id}", str(tmp_path / "out"), None)
    page = (tmp_path / "out" / "report.md").read_text()
    assert "Convolution algorithms against the default per layer" in page
    assert "| algorithms | winograd_f2 (winograd) | conv2 | fwd | implicit_gemm | winograd_nonfused |" in page
    # paper 004's Figs. 8 and 9: time and workspace per conv layer phase, an arm a bar, cuDNN's beside
    assert "Time per conv layer phase and algorithm" in page and "Workspace per conv layer phase and algorithm" in page
    assert {"algorithm_time.png", "algorithm_workspace.png"} <= {f.name for f in (tmp_path / "out").iterdir()}
    long = per_algorithm(frame)
    conv2 = long[(long.layer == "conv2") & (long.phase == "fwd")].set_index("arm")
    assert list(conv2.index) == [
        "implicit_gemm (shared)",
        *[a.label for a in arms("algorithms", 1) if not a.baseline],
        "cuDNN (library run)",
        "cuDNN best (cudnn.benchmark)",
    ]
    assert (
        conv2.loc["cuDNN (library run)", "ran"] == "fft" and conv2.loc["implicit_gemm (shared)", "workspace_bytes"] == 0
    )
    assert conv2.loc["fft (fft)", "workspace_bytes"] == 4 * conv_cost(net.layer("conv2"), "fwd", 1, "fft").workspace
