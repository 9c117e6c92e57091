"""`tracker agree` (tracker/analysis/agreement.py): whether two runs' counters agree, launch by launch,
on real recordings. Two ncu runs of one workload on an H100, five minutes apart (the batch-128
profile and the fusion experiment's separate arm, both at e5feb32: tests/data/RECORDINGS.md), are
the bar any second collector (CUPTI) is held to: what ncu does not reproduce itself, no
other collector can be asked to match."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tracker.analysis.agreement import agreement
from tracker.cli import cli
from tracker.store import open_store

DATA = Path(__file__).parent / "data"
B128 = str(DATA / "alexnet-b128-ncu-nvidia-h100-80gb-hbm3.db")
FUSION = str(DATA / "fusion-ncu-b128-nvidia-h100-80gb-hbm3.db")  # run 1: the separate arm, the same launches


@pytest.fixture(scope="module")
def twice():
    return agreement(open_store(B128, write=False), 1, 1, open_store(FUSION, write=False)).set_index("metric")


def test_two_ncu_runs_of_one_workload_agree_on_what_is_deterministic(twice):
    assert len(twice) == 80 and (twice["launches"] == 57).all()
    exact = ["instructions", "ffma", "fadd", "fp32_inst", "l1_global_load_sectors", "l1_bytes", "shared_bytes"]
    assert (twice.loc[exact, "worst_diff"] == 0).all() and twice.loc[exact, "agrees"].all()
    assert twice.loc["dram_read_bytes", "total_diff"] < 0.001 and twice.loc["duration_ns", "agrees"]
    assert twice["agrees"].sum() == 65


def test_what_ncu_does_not_reproduce_itself_is_named_with_its_worst_launch(twice):
    """Stall samples, tiny hit rates and the write-back traffic move from run to run: the worst
    launch and both values say where."""
    moved = twice[~twice["agrees"]]
    assert {"stall_no_instruction", "l2_write_hit_rate", "dram_write_bytes", "achieved_occupancy"} <= set(moved.index)
    worst = moved.loc["stall_no_instruction"]
    assert (worst["worst_at"], worst["a_at_worst"], worst["b_at_worst"]) == ("relu7/fwd #18", 2.84, 7.28)
    assert worst["worst_diff"] == pytest.approx(1 - 2.84 / 7.28)
    assert moved.loc["dram_write_bytes", "total_diff"] < 0.001  # per launch up to 9 %, over the step nothing
    assert set(moved["kind"]) == {"count", "rate"} and all(moved["within"] < 1)


def test_a_run_against_a_copy_of_itself_agrees_everywhere(tmp_path, runner):
    copy = tmp_path / "copy.db"
    shutil.copyfile(B128, copy)
    done = runner.invoke(cli, ["agree", "1", "1", "--db", B128, "--db-b", str(copy), "--format", "json"])
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout)
    assert len(rows) == 80 and all(r["agrees"] and r["worst_diff"] == 0 and r["within"] == 1 for r in rows)


def test_the_table_says_how_many_agree(runner):
    done = runner.invoke(cli, ["agree", "1", "1", "--db", B128, "--db-b", FUSION])
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[0] == (
        "run 1 against run 1: 65 of 80 metrics agree at every launch (counts within 5 %, rates within 10 %)"
    )
    assert "stall_no_instruction" in done.stdout and "relu7/fwd #18" in done.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["1", "1", "--db", B128], "RUN_A and RUN_B are the same run"),
        (
            ["1", "2", "--db", FUSION],
            "runs 1 and 2 launch different kernels at invocation 1 (relu_fwd_global and "
            "lrn_fwd_shared): their counters cannot be paired",
        ),
        (["1", "9", "--db", FUSION], "no run 9"),
    ],
)
def test_runs_that_cannot_be_paired_are_one_line(runner, args, message):
    done = runner.invoke(cli, ["agree", *args])
    assert done.exit_code != 0 and message in done.output and "Traceback" not in done.output
    assert len(done.output.strip().splitlines()) == 1


def test_a_run_without_counters_is_refused(tmp_path, runner):
    db = str(tmp_path / "model.db")
    assert runner.invoke(cli, ["profile", "alexnet", "--batch", "2", "--db", db]).exit_code == 0  # the model, no GPU
    done = runner.invoke(cli, ["agree", "1", "1", "--db", db, "--db-b", db])
    assert done.exit_code == 1 and "have no counted launch in common" in done.output
