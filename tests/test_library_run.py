"""A library run (`--impl torch`) stored, viewed, reported and compared like one of ours.

No GPU here. The model backend runs for real (it needs PyTorch only to record its versions). For
the measured path the two GPU seams are replaced: our kernels' pass 1 runs on the CPU emulation
(tests/emu) with made-up times (tests/made_up_times.py), and the library's pass 1 returns the
launch log read from the public A100 AlexNet trace, its kernels re-homed under our small net's
range names (tests/public_trace.py): real cuDNN and cuBLAS kernels, real device times.
"""

from __future__ import annotations

import importlib.util

import pytest
from samples import small_net

import tracker.experiment
import tracker.profile
from tracker.cli import cli
from tracker.gpu.workload import Workload
from tracker.profile import profile_workload
from tracker.store import find_run, launch_rows, layer_rows, open_store, run_dict

torch = pytest.importorskip("torch")


def profiled(db: str, implementation: str, net=None) -> int:
    workload = Workload.of(net or small_net(), 1, phases="fwd", repeat=2, warmup=0, implementation=implementation)
    return profile_workload(db, workload, backend="events").run_id


def test_a_library_run_records_who_ran_it_and_the_algorithm_of_each_layer_phase(tmp_path, gpu_seams):
    db = str(tmp_path / "t.db")
    run_id = profiled(db, "torch")
    store = open_store(db, write=False)
    run = run_dict(find_run(store, run_id))
    assert run["implementation"] == "torch" and run["variants"] == {} and run["tiles"] == {}
    assert run["library"]["torch"] == torch.__version__ and run["library"]["tf32"] is False
    algorithms = {(r["layer"], r["phase"]): r["algorithm"] for r in layer_rows(store, run_id) if r["launches"]}
    assert algorithms == {
        ("conv1", "fwd"): "implicit_precomp_gemm",
        ("relu1", "fwd"): None,
        ("pool1", "fwd"): None,
        ("conv2", "fwd"): "fft",
        ("relu2", "fwd"): None,
        ("fc3", "fwd"): "gemm",
        ("relu3", "fwd"): None,
        ("fc4", "fwd"): "gemm",
    }
    launches = launch_rows(store, run_id)
    conv2 = [(k["kernel_name"][:20], k["role"]) for k in launches if k["layer_id"] == 5 and k["repeat"] == 1]
    assert conv2 == [
        ("void fft2d_r2c_32x32", "transform"),
        ("void fft2d_r2c_32x32", "transform"),
        ("ampere_gcgemm_64x64_", "math"),
        ("void fft2d_c2r_32x32", "transform"),
    ]
    per_iteration = [sum(k["time_ms"] for k in launches if k["layer_id"] == 5 and k["repeat"] == r) for r in (0, 1)]
    measured = next(r for r in layer_rows(store, run_id) if r["layer"] == "conv2")["measured_ms"]
    assert measured == pytest.approx(sum(per_iteration) / 2)  # the median of two iterations


def test_show_and_report_say_which_algorithm_each_conv_ran(tmp_path, gpu_seams, runner):
    from tracker.nets import build

    db = str(tmp_path / "t.db")
    run_id = profiled(db, "torch", build("alexnet"))
    shown = runner.invoke(cli, ["show", str(run_id), "--db", db])
    assert shown.exit_code == 0, shown.output
    assert "implementation: torch" in shown.output and "algorithm" in shown.output and " fft" in shown.output
    out = tmp_path / "report"
    reported = runner.invoke(cli, ["report", str(run_id), "--db", db, "--out", str(out)])
    assert reported.exit_code == 0, reported.output
    assert (
        "conv1 fwd: implicit_precomp_gemm; conv2 fwd: fft; conv3 fwd: implicit_gemm; conv4 fwd: implicit_gemm; "
        "conv5 fwd: implicit_gemm"
    ) in reported.output
    page = (out / "report.md").read_text()
    assert "fft2d_r2c_32x32 (transform); ampere_gcgemm_64x64_nt (math); fft2d_c2r_32x32 (transform)" in page
    assert f"PyTorch {torch.__version__}" in page


def test_compare_puts_our_kernels_beside_the_librarys_per_layer_phase(tmp_path, gpu_seams, runner):
    db = str(tmp_path / "t.db")
    ours, theirs = profiled(db, "ours"), profiled(db, "torch")
    result = runner.invoke(cli, ["compare", str(ours), str(theirs), "--db", db, "--format", "json"])
    assert result.exit_code == 0, result.output
    import json

    rows = {(r["layer"], r["phase"]): r for r in json.loads(result.output)}
    conv2 = rows[("conv2", "fwd")]
    # ours: the conv rule's Winograd F(4x4) (its transforms name it non-fused), against cuDNN's FFT
    assert (conv2["algorithm_a"], conv2["algorithm_b"]) == ("winograd_nonfused", "fft")
    # layer 5 made up: 0.5 ms a launch x jitter 1.00, 1.01; Winograd's 4 (filters, input, products, output)
    assert conv2["a_ms"] == pytest.approx(4 * 0.5 * (1.00 + 1.01) / 2)
    assert conv2["speedup"] == pytest.approx(conv2["a_ms"] / conv2["b_ms"])
    assert rows[("lrn1", "fwd")]["b_ms"] == 0  # PyTorch's trace ran nothing under lrn1/fwd here
    table = runner.invoke(cli, ["compare", str(ours), str(theirs), "--db", db])
    assert f"run {theirs} against run {ours} (torch against ours)" in table.output and "algorithm b" in table.output


def tracker_report(store, target: str, out) -> str:
    from tracker.report import report

    report(store, target, str(out), None)
    return (out / "report.md").read_text()


def test_the_library_experiment_records_every_arm_and_reports_speedups(tmp_path, gpu_seams):
    """Ours, PyTorch with cuDNN's heuristic, and PyTorch with cudnn.benchmark (cuDNN's best: the
    runs record which), each library arm against ours."""
    from tracker.analysis.experiments import results, runs

    db = str(tmp_path / "t.db")
    experiment_id = tracker.experiment.run_experiment(db, "library", small_net(), 1, repeat=2, warmup=0)
    store = open_store(db, write=False)
    arms = runs(store, experiment_id)
    assert list(arms["arm"]) == ["ours", "torch", "torch best"]
    assert list(arms["baseline"].astype(bool)) == [True, False, False]
    ran = [run_dict(find_run(store, int(r))) for r in arms["run_id"]]
    assert [r["implementation"] for r in ran] == ["ours", "torch", "torch"]
    assert [r["library"]["cudnn_benchmark"] for r in ran[1:]] == [False, True]
    frame = results(store, experiment_id, "library")
    assert set(frame["arm"]) == {"torch", "torch best"}
    conv2 = frame[(frame["layer"] == "conv2") & (frame["phase"] == "fwd")].iloc[0]
    assert conv2["algorithm_b"] == "fft" and conv2["speedup"] > 0
    report = tracker_report(store, f"e{experiment_id}", tmp_path / "report")
    assert "PyTorch (cuDNN, cuBLAS) against our kernels per layer" in report
    assert "| library | torch | conv2 | fwd | winograd_nonfused | fft |" in report  # ours against cuDNN's FFT


def test_the_model_backend_records_a_library_run_without_a_gpu(tmp_path, runner):
    db = str(tmp_path / "t.db")
    result = runner.invoke(
        cli,
        [
            "profile",
            "alexnet",
            "--batch",
            "16",
            "--impl",
            "torch",
            "--backend",
            "model",
            "--db",
            db,
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    run = run_dict(find_run(open_store(db, write=False), "last"))
    assert (run["implementation"], run["backend"], run["library"]["cudnn_benchmark"]) == ("torch", "model", False)


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--impl", "torch", "--variant", "shared"],
            "--variant chooses among our kernels; --impl torch runs the library's",
        ),
        (["--impl", "torch", "--l1-bypass"], "--l1-bypass chooses among our kernels"),
        (["--tf32", "--cudnn-benchmark"], "--tf32 and --cudnn-benchmark choose how PyTorch runs: add --impl torch"),
        (["--impl", "cudnn"], "Invalid value for '--impl'"),
    ],
)
def test_options_of_the_other_implementation_are_refused_in_one_line(tmp_path, runner, args, message):
    db = tmp_path / "t.db"
    result = runner.invoke(cli, ["profile", "alexnet", "--backend", "model", "--db", str(db), *args])
    assert result.exit_code != 0 and message in result.output
    assert "Traceback" not in result.output and not db.exists()


def test_without_pytorch_impl_torch_is_one_clear_line_and_creates_nothing(tmp_path, runner, monkeypatch):
    """Where PyTorch would run (a GPU backend, a user's own model) its absence is one line; the
    model backend predicts --impl torch's network, ours, without it."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    db = tmp_path / "t.db"
    result = runner.invoke(cli, ["profile", "--torch", "mymodels:build", "--db", str(db)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: --torch needs PyTorch, which is not installed: pip install -e '.[torch]'"
    ]
    assert not db.exists()
    result = runner.invoke(cli, ["profile", "alexnet", "--impl", "torch", "--backend", "model", "--db", str(db)])
    assert result.exit_code == 0 and "run 1 complete: alexnet run by torch" in result.output
    db.unlink()
    result = runner.invoke(cli, ["experiment", "library", "alexnet", "--db", str(db)])
    assert result.exit_code == 1 and "experiment library needs PyTorch" in result.output and not db.exists()
