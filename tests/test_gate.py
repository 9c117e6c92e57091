"""`tracker gate` and `tracker history` on the H100 recordings (tests/data/RECORDINGS.md): AlexNet at
batch 128, five measured iterations per run, our global, constant, shared, GEMM and fused
variants with L1 cached and bypassed; each verdict checked against the run's own iteration times
read here by plain SQL."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from recorded import B16, CORE_NCU, DATA, EXPERIMENTS, L1_BYPASS, recording

from tracker.cli import cli
from tracker.model import lookup
from tracker.nets import build
from tracker.profile import profile
from tracker.store import open_store, run_sql

GLOBAL_CA, SHARED_CA = 1, 5  # e1 l1-bypass's arms: our global-memory kernels, and the shared-memory ones


@pytest.fixture(scope="module")
def l1(tmp_path_factory) -> str:
    return recording(L1_BYPASS, tmp_path_factory.mktemp("gate"))


def gated(runner, *args: str) -> tuple[int, list[dict]]:
    done = runner.invoke(cli, ["gate", *args, "--format", "json"])
    assert done.exit_code in (0, 1), done.output
    return done.exit_code, json.loads(done.stdout)


def expected(db: str, run: int, base: int, tolerance: float = 5.0) -> dict[tuple, bool]:
    """Per layer phase, whether it regressed, from the iterations' times: the median worse by more
    than the tolerance and the run's fastest iteration slower than the base's slowest."""
    _, rows = run_sql(
        open_store(db, write=False),
        "SELECT t.run_id, l.name, t.phase, t.repeat, t.measured_ms FROM layer_time_repeat t JOIN layer l "
        f"ON l.run_id = t.run_id AND l.layer_id = t.layer_id WHERE t.run_id IN ({run}, {base})",
    )
    times: dict[tuple, dict[int, list[float]]] = {}
    for run_id, layer, phase, _, ms in rows:
        times.setdefault((layer, phase), {}).setdefault(run_id, []).append(ms)
    verdict = {}
    for key, by_run in times.items():
        ours, theirs = sorted(by_run[run]), sorted(by_run[base])
        median, base_median = ours[len(ours) // 2], theirs[len(theirs) // 2]
        verdict[key] = median > base_median * (1 + tolerance / 100) and ours[0] > theirs[-1]
    return verdict


@pytest.mark.parametrize("run, base", [(GLOBAL_CA, SHARED_CA), (SHARED_CA, GLOBAL_CA), (2, GLOBAL_CA)])
def test_every_layer_phase_is_judged_as_its_iterations_say(runner, l1, run, base):
    code, rows = gated(runner, str(run), "--against", str(base), "--db", l1)
    judged = {(r["layer"], r["phase"]): r["regression"] for r in rows if r["layer"] != "iteration"}
    assert judged == expected(l1, run, base) and len(judged) == 49
    assert code == (1 if any(r["regression"] for r in rows) else 0)
    assert all(r["beyond_spread"] is not None for r in rows)  # five iterations each: the spread is known


def test_the_global_kernels_regress_against_the_shared_ones_and_the_shared_pass(runner, l1):
    code, rows = gated(runner, str(GLOBAL_CA), "--against", str(SHARED_CA), "--db", l1)
    whole = next(r for r in rows if r["layer"] == "iteration")
    assert code == 1 and whole["regression"] and whole["change_pct"] > 100  # conv in global memory: 2x slower
    code, rows = gated(runner, str(SHARED_CA), "--against", str(GLOBAL_CA), "--db", l1)
    whole = next(r for r in rows if r["layer"] == "iteration")
    assert not whole["regression"] and whole["change_pct"] < -50


def test_a_loose_tolerance_passes_what_a_tight_one_fails(runner, l1):
    tight, _ = gated(runner, "2", "--against", str(GLOBAL_CA), "--db", l1, "--tolerance", "1")
    loose, rows = gated(runner, "2", "--against", str(GLOBAL_CA), "--db", l1, "--tolerance", "1000")
    assert (tight, loose) == (1, 0) and not any(r["regression"] for r in rows)


def test_the_same_arm_of_another_experiment_is_noise_where_the_spreads_overlap(runner, l1, tmp_path):
    """The l1-bypass experiment ran twice on the H100 (20:55 and 21:28): its global-memory arm
    against itself from the other store. Wherever the two runs' iterations overlap, nothing fails."""
    other = recording(EXPERIMENTS, tmp_path)
    _, rows = gated(runner, str(GLOBAL_CA), "--against", str(GLOBAL_CA), "--db", l1, "--base-db", other)
    assert rows and all(not r["regression"] for r in rows if r["beyond_spread"] is False)


def test_junit_has_a_case_a_figure_and_a_failure_a_regression(runner, l1):
    done = runner.invoke(cli, ["gate", str(GLOBAL_CA), "--against", str(SHARED_CA), "--db", l1, "--format", "junit"])
    assert done.exit_code == 1
    suite = ET.fromstring(done.stdout)
    _, rows = gated(runner, str(GLOBAL_CA), "--against", str(SHARED_CA), "--db", l1)
    failed = [case.get("name") for case in suite.iter("testcase") if case.find("failure") is not None]
    assert int(suite.get("tests")) == len(rows) == len(list(suite.iter("testcase")))
    assert failed == [f"{r['figure']} {r['layer']} {r['phase']}" for r in rows if r["regression"]]
    assert int(suite.get("failures")) == len(failed) > 0


def test_a_counter_is_gated_by_its_catalog_direction(runner, tmp_path):
    """Two ncu runs of AlexNet at batch 16 and 128 on one GPU: gated across batch, DRAM bytes grow
    with the batch (a regression by the tolerance alone: one iteration each), hit rates fall worse
    lower."""
    db = recording(B16, tmp_path)
    other = recording(CORE_NCU, tmp_path)
    code, rows = gated(runner, "1", "--against", "1", "--db", other, "--base-db", db, "--across", "batch",
                       "--metric", "dram_read_bytes", "--metric", "l1_hit_rate")  # fmt: skip
    dram = [r for r in rows if r["figure"] == "dram_read_bytes"]
    assert dram and all(r["beyond_spread"] is None for r in dram) and code == 1
    assert all(r["regression"] == (r["run"] > r["base"] * 1.05) for r in dram)
    hits = [r for r in rows if r["figure"] == "l1_hit_rate" and r["change_pct"] is not None]
    assert hits and all(r["regression"] == (r["run"] < r["base"] * 0.95 and r["base"] > 0) for r in hits)


@pytest.mark.parametrize(
    "args, message",
    [
        (["1", "--against", "1"], "gated against itself"),
        (["99", "--against", "1"], "no run 99"),
        (["1", "--against", "5", "--metric", "nope"], "no metric 'nope'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(runner, l1, args, message):
    done = runner.invoke(cli, ["gate", *args, "--db", l1])
    assert done.exit_code == 2 and message in done.output and len(done.output.strip().splitlines()) == 1


def test_runs_of_two_gpus_are_refused_unless_told(runner, l1, tmp_path):
    """Our AlexNet at batch 128 on the H200 (2026-11-26, one iteration) against the H100's."""
    h200 = recording("alexnet-b128-default-h200.db.gz", tmp_path, DATA / "gpu-2026-11-26b-h200")
    args = ["gate", "1", "--db", h200, "--against", str(GLOBAL_CA), "--base-db", l1]
    refused = runner.invoke(cli, args)
    assert refused.exit_code == 2 and "differ in gpu (NVIDIA H200 against NVIDIA H100 80GB HBM3)" in refused.output
    code, rows = gated(runner, *args[1:], "--across", "gpu")
    assert len(rows) == 50 and code == (1 if any(r["regression"] for r in rows) else 0)


def test_a_model_run_or_another_workload_is_refused(runner, tmp_path):
    db = str(tmp_path / "t.db")
    profile(db, build("alexnet"), 16, device=lookup("h100"))
    profile(db, build("alexnet"), 32, device=lookup("h100"))
    done = runner.invoke(cli, ["gate", "2", "--against", "1", "--db", db])
    assert done.exit_code == 2 and "differ in batch (32 against 16)" in done.output
    done = runner.invoke(cli, ["gate", "2", "--against", "1", "--db", db, "--across", "batch"])
    assert done.exit_code == 2 and "no measured times" in done.output


def test_history_lists_a_workloads_runs_with_the_commit_that_made_each(runner, tmp_path):
    db = str(tmp_path / "t.db")
    for batch in (16, 32, 16):
        profile(db, build("alexnet"), batch, device=lookup("h100"))
    done = runner.invoke(cli, ["history", "--network", "alexnet", "--batch", "16", "--db", db, "--format", "json"])
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout)
    root = Path(__file__).parents[1]
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert [r["run_id"] for r in rows] == [1, 3] and all(r["commit"] == head.strip()[:10] for r in rows)
    assert all(r["iteration_ms"] == pytest.approx(rows[0]["iteration_ms"]) and r["source"] == "model" for r in rows)
    plot = tmp_path / "history.png"
    drawn = runner.invoke(cli, ["history", "--network", "alexnet", "--batch", "16", "--db", db, "--plot", str(plot)])
    assert drawn.exit_code == 0 and plot.read_bytes()[:4] == b"\x89PNG"


def test_history_of_recordings_made_before_provenance_shows_none(runner, l1):
    done = runner.invoke(cli, ["history", "--network", "alexnet", "--batch", "128", "--db", l1, "--format", "json"])
    rows = json.loads(done.stdout)
    assert len(rows) == 10 and all(r["commit"] is None for r in rows)
    assert [r["started_at"] for r in rows] == sorted(r["started_at"] for r in rows)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--metric", "nope"], "no figure 'nope'"),
        (["--batch", "3"], "no complete run of alexnet at batch 3"),
        (["--plot", "out.txt"], "name a .png, .svg file"),
    ],
)
def test_history_refuses_bad_input_in_one_line(runner, l1, args, message):
    base = {"--network": "alexnet", "--batch": "128"}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    done = runner.invoke(cli, ["history", *[x for pair in base.items() for x in pair], "--db", l1])
    assert done.exit_code == 1 and message in done.output and len(done.output.strip().splitlines()) == 1


def mutated(db: str, tmp_path: Path, layer: str, phase: str, factor: float) -> str:
    """A copy of ``db`` whose run 1 ran ``layer`` ``phase`` ``factor`` times slower in every iteration,
    its rollups written again as a run's are."""
    import shutil

    from sqlalchemy import text

    from tracker.store import rollups

    copy = str(tmp_path / f"mutated-{layer}-{phase}.db")
    shutil.copyfile(db, copy)
    store = open_store(copy, write=True)
    with store.begin() as conn:
        conn.execute(
            text(
                "UPDATE launch SET time_ms = time_ms * :factor WHERE run_id = 1 AND phase = :phase AND layer_id = "
                "(SELECT layer_id FROM layer WHERE run_id = 1 AND name = :layer)"
            ),
            {"factor": factor, "layer": layer, "phase": phase},
        )
        rollups.rebuild(conn)
    store.dispose()
    return copy


def test_two_recordings_of_one_workload_pass(runner, l1, tmp_path):
    """The global-memory arm recorded twice on the H100, 30 minutes apart (two l1-bypass experiments)."""
    other = recording(EXPERIMENTS, tmp_path)
    code, rows = gated(runner, str(GLOBAL_CA), "--against", str(GLOBAL_CA), "--db", l1, "--base-db", other)
    assert code == 0 and len(rows) == 50


def test_one_layer_phase_made_ten_percent_slower_fails_alone(runner, l1, tmp_path):
    _, spreads = run_sql(
        open_store(l1, write=False),
        "SELECT l.name, t.phase, t.spread_pct FROM layer_time t JOIN layer l ON l.run_id = t.run_id "
        "AND l.layer_id = t.layer_id WHERE t.run_id = 1 AND t.measured_ms > 1 ORDER BY t.spread_pct",
    )
    layer, phase, spread = spreads[0]  # the steadiest phase over a millisecond: 10 % is beyond its spread
    assert spread < 10
    slower = mutated(l1, tmp_path, layer, phase, 1.10)
    code, rows = gated(runner, "1", "--against", "1", "--db", slower, "--base-db", l1)
    assert code == 1 and [(r["layer"], r["phase"]) for r in rows if r["regression"]] == [(layer, phase)]
    assert next(r for r in rows if r["regression"])["change_pct"] == pytest.approx(10, abs=1e-6)


def test_a_three_percent_change_within_the_spread_passes(runner, l1, tmp_path):
    _, spreads = run_sql(
        open_store(l1, write=False),
        "SELECT l.name, t.phase, t.spread_pct FROM layer_time t JOIN layer l ON l.run_id = t.run_id "
        "AND l.layer_id = t.layer_id WHERE t.run_id = 1 ORDER BY t.spread_pct DESC",
    )
    layer, phase, spread = spreads[0]  # the noisiest phase: 3 % is within its spread
    assert spread > 3
    code, rows = gated(
        runner, "1", "--against", "1", "--db", mutated(l1, tmp_path, layer, phase, 1.03), "--base-db", l1
    )
    changed = next(r for r in rows if (r["layer"], r["phase"]) == (layer, phase))
    assert code == 0 and changed["change_pct"] == pytest.approx(3, abs=1e-6) and changed["beyond_spread"] is False
