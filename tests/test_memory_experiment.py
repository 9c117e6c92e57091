"""Paper 002's study as an experiment: `tracker experiment memory` sweeps network options
(--vary, an axis of every experiment kind) and batch sizes, records each arm's predicted and
measured peak memory, ours and PyTorch's, and an arm that runs out of memory as such while the
rest run. No GPU here: the model backend, and an arm made to run out of memory."""

from __future__ import annotations

import json

import pytest

import tracker.experiment
from tracker.cli import cli
from tracker.errors import OutOfMemory, TrackerError
from tracker.experiment import Arm, arms
from tracker.nets import axis, build

pytest.importorskip("torch")  # the memory study's PyTorch arm records torch's versions even on the model


def test_a_network_option_sweeps_every_arm_in_every_combination():
    plan = arms("memory", 1, batches=(1, 2), vary=(axis("input_size=64,96"), axis("depth=3")))
    assert [a.label for a in plan] == [
        f"{impl} input_size={size} depth=3 b{b}" for size in (64, 96) for b in (1, 2) for impl in ("ours", "torch")
    ]
    assert {tuple(a.options.items()) for a in plan} == {
        (("input_size", "64"), ("depth", 3)),
        (("input_size", "96"), ("depth", 3)),
    }
    arm = plan[-1]
    assert arm.network(build("unet3d")).input_shape == (1, 96, 96, 96)
    assert Arm.of(type("Row", (), {**arm.row(), "spec": {**arm.row()["spec"]}})()) == arm
    old = {**arm.row()["spec"]}
    del old["options"]  # an arm planned before --vary
    assert Arm.of(type("Row", (), {**arm.row(), "spec": old})()).options == {}


@pytest.mark.parametrize(
    "vary, why",
    [
        ("depth", "is not NAME=V,V,..."),
        ("nosuch=1", "unknown network option 'nosuch'"),
        ("depth=two", "depth: 'two' is not a whole number"),
        ("conv-type=big", "conv_type is one of standard"),
        ("depth=2,2", "names a value twice"),
        ("input_size=", "the values of input_size is empty"),
    ],
)
def test_a_bad_vary_is_a_one_line_usage_error(runner, tmp_path, vary, why):
    done = runner.invoke(
        cli, ["experiment", "memory", "unet3d", "--vary", vary, "--backend", "model", "--db", str(tmp_path / "t.db")]
    )
    assert done.exit_code == 2 and why in done.output, done.output
    assert not (tmp_path / "t.db").exists()


def test_an_option_the_network_does_not_take_is_refused_before_any_arm(runner, tmp_path):
    done = runner.invoke(
        cli,
        [
            "experiment",
            "memory",
            "alexnet",
            "--vary",
            "depth=2,3",
            "--backend",
            "model",
            "--db",
            str(tmp_path / "t.db"),
        ],
    )
    assert done.exit_code == 1 and "alexnet does not take --depth" in done.output, done.output
    with pytest.raises(TrackerError, match="--vary names depth twice"):
        arms("memory", 1, vary=(axis("depth=2"), axis("depth=3")))


def test_the_memory_study_on_the_model_backend_records_each_arms_predicted_peak(runner, tmp_path):
    db = str(tmp_path / "t.db")
    done = runner.invoke(
        cli,
        [
            "experiment",
            "memory",
            "unet2d",
            "--vary",
            "input_size=32,48",
            "--batches",
            "1,2",
            "--base-filters",
            "8",
            "--backend",
            "model",
            "--db",
            db,
            "--format",
            "json",
        ],
    )
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout)
    assert [(r["implementation"], r["options"], r["batch"]) for r in rows] == [
        (impl, f"input_size={size}", b) for size in (32, 48) for b in (1, 2) for impl in ("ours", "torch")
    ]
    assert all(r["state"] == "complete" and r["measured_peak_bytes"] is None for r in rows)
    peaks = [r["predicted_peak_bytes"] for r in rows[::2]]  # ours: 32 b1, 32 b2, 48 b1, 48 b2
    assert peaks[0] < peaks[1] < peaks[3] and peaks[0] < peaks[2] < peaks[3]
    report = runner.invoke(cli, ["report", "e1", "--db", db, "--out", str(tmp_path / "report")])
    assert report.exit_code == 0, report.output
    assert "8 of 8 arms complete" in report.output and (tmp_path / "report" / "memory_peak.svg").exists()
    finding = report.output[report.output.index("the largest batch of unet2d") :]
    assert "H100 SXM5 80GB" in finding and "H200 SXM 141GB" in finding and "at batch 1 the peak of" in finding
    assert all(part in finding for part in ("activations", "weights", "weight gradients", "activation gradients"))


def test_the_largest_batch_that_fits_is_the_last_whose_predicted_peak_does():
    from tracker.model import lookup, memory
    from tracker.model.memory import largest_batch
    from tracker.model.roofline import MAX_BATCH
    from tracker.nets import build

    net = build("alexnet")
    h100 = lookup("h100").memory_gb * 1e9
    fits = largest_batch(net, h100)
    assert memory(net, fits).peak_bytes <= h100 < memory(net, fits + 1).peak_bytes
    assert largest_batch(net, memory(net, 1).peak_bytes - 1) == 0
    assert largest_batch(net, 1e18) == MAX_BATCH


def test_an_arm_out_of_memory_is_recorded_and_the_rest_run(runner, tmp_path, monkeypatch):
    """The larger input runs out of memory in both implementations: those arms end failed with the
    reason, the others complete, and the study is an answer (exit 0), not a failed experiment."""
    real = tracker.experiment.profile_workload

    def profile(db, work, **kwargs):
        if work.net.input_shape[1] == 48:
            raise OutOfMemory(f"out of memory: {work.network} at batch {work.batch} (input 48)")
        return real(db, work, **kwargs)

    monkeypatch.setattr(tracker.experiment, "profile_workload", profile)
    done = runner.invoke(
        cli,
        [
            "experiment",
            "memory",
            "unet2d",
            "--vary",
            "input_size=48,32",
            "--base-filters",
            "8",
            "--backend",
            "model",
            "--db",
            str(tmp_path / "t.db"),
        ],
    )
    assert done.exit_code == 0, done.output
    assert "complete, 2 arms out of memory" in done.output
    assert done.output.count("out of memory: unet2d at batch 128 (input 48): recorded, and the next arm runs") == 2
    states = runner.invoke(cli, ["experiments", "e1", "--db", str(tmp_path / "t.db"), "--format", "json"])
    arms_ = json.loads(states.stdout)
    assert [a["state"] for a in arms_] == ["failed", "failed", "complete", "complete"]
    assert arms_[0]["reason"].startswith("OutOfMemory: out of memory")


def test_ours_is_left_out_where_our_kernels_cannot_run_the_network(runner, tmp_path):
    """unet2d's separable convolutions (grouped) have no kernels of ours yet: the study runs
    PyTorch's arms alone, saying why; unet3d's layers all have ours."""
    done = runner.invoke(
        cli,
        [
            "experiment",
            "memory",
            "unet2d",
            "--vary",
            "input_size=32",
            "--conv-type",
            "separable",
            "--backend",
            "model",
            "--db",
            str(tmp_path / "t.db"),
            "--format",
            "json",
        ],
    )
    assert done.exit_code == 0, done.output
    assert [r["arm"] for r in json.loads(done.stdout)] == ["torch input_size=32"]
    assert "ours input_size=32: left out: unet2d has layers with no kernels yet: conv (grouped)" in done.stderr
    done = runner.invoke(
        cli,
        [
            "experiment",
            "memory",
            "unet3d",
            "--vary",
            "input_size=32",
            "--base-filters",
            "4",
            "--backend",
            "model",
            "--db",
            str(tmp_path / "t.db"),
            "--format",
            "json",
        ],
    )
    assert done.exit_code == 0, done.output
    assert [r["arm"] for r in json.loads(done.stdout)] == ["ours input_size=32", "torch input_size=32"]
