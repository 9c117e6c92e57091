"""Experiments as sweeps (tracker/experiment.py, tracker/executors): arms planned over several axes,
each arm's state in the store, a failed experiment resumed keeping its complete arms, and what
the Slurm executor refuses before anything is written. No cluster here (tests/test_slurm.py
runs one); the arms run on the model backend, which needs no GPU."""

from __future__ import annotations

import json

import pytest

import tracker.profile
from tracker.errors import TrackerError
from tracker.executors import Slurm
from tracker.experiment import Arm, arms, check, run_experiment
from tracker.model import lookup
from tracker.nets import Network, build
from tracker.store import find_experiment, open_store
from tracker.store.queries import arm_rows


def test_a_sweep_runs_every_arm_at_each_batch_on_each_gpu_and_compares_within_each_cell():
    plan = arms("variants", 64, batches=(16, 64), variants=("shared", "global"), gpus=("h100", "a100"))
    assert [a.label for a in plan[:4]] == [
        "shared b16 @h100",
        "global b16 @h100",
        "shared b64 @h100",
        "global b64 @h100",
    ]
    assert len(plan) == 8 and {a.gpu for a in plan} == {"h100", "a100"}
    comparisons = {a.comparison for a in plan}
    assert comparisons == {f"variants b{b} @{g}" for b in (16, 64) for g in ("h100", "a100")}
    for comparison in comparisons:  # one baseline per cell: the first variant given
        assert [a.name for a in plan if a.comparison == comparison and a.baseline] == ["shared"]
    assert all(Arm.of(_Row(a.row())) == a for a in plan)  # what the store holds plans the same arm


def test_the_batch_kind_keeps_batches_as_its_own_axis_and_crosses_variants():
    plan = arms("batch", 16, batches=(16, 32), variants=("global", "shared"))
    assert [(a.label, a.comparison, a.baseline, a.batch) for a in plan] == [
        ("global batch 16", "batch global", True, 16),
        ("global batch 32", "batch global", False, 32),
        ("shared batch 16", "batch shared", True, 16),
        ("shared batch 32", "batch shared", False, 32),
    ]
    assert [a.label for a in arms("batch", 16, batches=(16, 32))] == ["batch 16", "batch 32"]  # as before sweeps


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(kind="fusion", variants=("shared",)), "--variants chooses the arms of"),
        (dict(kind="variants", variants=("shraed",)), r"unknown variant 'shraed' \(did you mean shared\?\)"),
        (dict(kind="variants", variants=("shared", "shared")), "names a variant twice"),
    ],
)
def test_variants_that_cannot_be_planned_are_refused(bad, message):
    with pytest.raises(TrackerError, match=message):
        arms(bad["kind"], 16, variants=bad["variants"])


def test_gpus_are_catalog_devices_on_the_model_backend_and_need_a_cluster_on_a_gpu_backend():
    assert check("batch", "model", None, "local", ("h100", "a100"))[0] == "model"
    with pytest.raises(TrackerError, match="unknown device 'h1000'"):
        check("batch", "model", None, "local", ("h1000",))
    with pytest.raises(TrackerError, match="give one"):
        check("batch", "model", lookup("h100"), "local", ("a100",))
    with pytest.raises(TrackerError, match="needs a cluster"):
        check("batch", "events", None, "local", ("h100",))
    assert check("fusion", "auto", None, "slurm", ("h100",)) == (
        "auto",
        "auto: chosen on each node as tracker profile chooses",
    )


def test_the_slurm_executor_refuses_what_a_cluster_cannot_run_before_anything_is_written(tmp_path, monkeypatch):
    net, mine = build("alexnet"), Network("mine", (3, 8, 8), options={})  # mine: no name tracker builds
    with pytest.raises(TrackerError, match="not the SQLite file"):
        Slurm().check(str(tmp_path / "trace.db"), net, "model")
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    with pytest.raises(TrackerError, match="needs Slurm's sbatch, squeue, scancel on PATH"):
        Slurm().check("postgresql://u@db.example/traces", net, "model")
    for name in ("sbatch", "squeue", "scancel"):
        (tmp_path / name).write_text("#!/bin/sh\nexit 1\n")
        (tmp_path / name).chmod(0o755)
    with pytest.raises(TrackerError, match="not one tracker builds by name"):
        Slurm().check("postgresql://u@db.example/traces", mine, "model")
    (tmp_path / "file").write_text("")
    with pytest.raises(TrackerError, match="cannot create the log directory"):
        Slurm(logs=str(tmp_path / "file" / "logs")).check("postgresql://u@db.example/traces", net, "model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "sbatch", "scancel", "squeue"]


def test_a_failed_arm_is_marked_and_the_experiment_resumes_keeping_complete_arms(db, monkeypatch):
    predict = tracker.profile.predict
    failing = {32}

    def predict_or_fail(net, batch, *args, **kwargs):
        if batch in failing:
            raise TrackerError(f"made-up failure at batch {batch}")
        return predict(net, batch, *args, **kwargs)

    monkeypatch.setattr(tracker.profile, "predict", predict_or_fail)
    sweep = dict(batches=(16, 32, 64), backend="model", gpus=("h100", "a100"))
    with pytest.raises(TrackerError, match="made-up failure at batch 32"):
        run_experiment(db, "batch", build("alexnet"), 16, **sweep)
    store = open_store(db, write=False)
    first = {a.label: a for a in arm_rows(store, 1)}
    assert [a.state for a in first.values()] == ["complete", "failed", "failed", "failed", "failed", "failed"]
    assert first["batch 32 @h100"].reason == "TrackerError: made-up failure at batch 32"
    assert "made-up failure" in first["batch 32 @h100"].log and first["batch 32 @h100"].run_id is not None
    assert first["batch 64 @h100"].reason.startswith("TrackerError") and first["batch 64 @h100"].run_id is None
    assert find_experiment(store, 1).status == "failed"

    failing.clear()
    lines: list[str] = []
    assert run_experiment(db, "batch", build("alexnet"), 16, **sweep, echo=lines.append) == 1
    assert "resuming experiment e1: 1 of 6 arms complete (kept)" in lines[1]
    again = {a.label: a for a in arm_rows(store, 1)}
    assert all(a.state == "complete" for a in again.values())
    assert again["batch 16 @h100"].run_id == first["batch 16 @h100"].run_id  # kept, not run again
    assert again["batch 16 @h100"].attempts == 1 and again["batch 32 @h100"].attempts == 2
    assert {a.device_name for a in again.values()} == {lookup("h100").name, lookup("a100").name}
    assert find_experiment(store, 1).status == "complete"
    assert run_experiment(db, "batch", build("alexnet"), 16, **sweep) == 2  # a complete one is not resumed


def test_the_experiment_command_compares_gpu_with_gpu_and_lists_each_arm(runner, tmp_path):
    from tracker.cli import cli

    db = str(tmp_path / "trace.db")
    result = runner.invoke(
        cli,
        [
            "experiment",
            "batch",
            "alexnet",
            "--batches",
            "16,32",
            "--gpus",
            "h100,a100",
            "--backend",
            "model",
            "--db",
            db,
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    versus = [r for r in rows if r["table"] == "gpu" and r["layer"] == "iteration"]
    assert [(r["comparison"], r["arm"]) for r in versus] == [
        ("gpu h100 -> a100", "batch 16 @a100"),
        ("gpu h100 -> a100", "batch 32 @a100"),
    ]
    for r in versus:
        assert r["speedup"] == pytest.approx(r["a_ms"] / r["b_ms"]) and r["speedup"] < 1  # the model: A100 slower
    scaling = [r for r in rows if r["table"] == "arms"]
    assert {(r["gpu"], r["batch"]) for r in scaling} == {(g, b) for g in ("h100", "a100") for b in (16, 32)}

    listed = runner.invoke(cli, ["experiments", "--db", db, "--format", "json"])
    assert json.loads(listed.output)[0] | {"started_at": None} == {
        "experiment": "e1",
        "kind": "batch",
        "status": "complete",
        "network": "alexnet",
        "backend": "model",
        "executor": "local",
        "arms": "4 complete",
        "runs": "1,2,3,4",
        "started_at": None,
    }
    detail = json.loads(runner.invoke(cli, ["experiments", "e1", "--db", db, "--format", "json"]).output)
    assert [(a["arm"], a["gpu"], a["state"], a["run"]) for a in detail] == [
        ("batch 16 @h100", "h100", "complete", 1),
        ("batch 32 @h100", "h100", "complete", 2),
        ("batch 16 @a100", "a100", "complete", 3),
        ("batch 32 @a100", "a100", "complete", 4),
    ]
    assert runner.invoke(cli, ["experiments", "e7", "--db", db]).exit_code == 1


def test_detach_and_the_cluster_options_need_a_cluster(runner, tmp_path):
    from tracker.cli import cli

    result = runner.invoke(
        cli,
        [
            "experiment",
            "batch",
            "alexnet",
            "--backend",
            "model",
            "--device",
            "h100",
            "--detach",
            "--db",
            str(tmp_path / "t.db"),
        ],
    )
    assert result.exit_code == 2 and "--detach leaves a cluster's jobs running" in result.output
    result = runner.invoke(cli, ["experiment", "batch", "alexnet", "--gpus", "h100;rm -rf /", "--backend", "model"])
    assert result.exit_code == 2 and "is not a name" in result.output
    result = runner.invoke(
        cli,
        [
            "experiment",
            "batch",
            "alexnet",
            "--executor",
            "slurm",
            "--sbatch",
            "'unclosed",
            "--backend",
            "model",
            "--device",
            "h100",
        ],
    )
    assert result.exit_code == 2 and "--sbatch: No closing quotation" in result.output
    assert not list(tmp_path.iterdir())


class _Row:
    """An experiment_arm row as the store gives it back."""

    def __init__(self, columns: dict):
        self.__dict__.update(json.loads(json.dumps(columns)))
