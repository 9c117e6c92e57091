"""`tracker export --format perfetto|chrome`: each file is read back by a reader that is not the
writer (Perfetto's own protobuf classes, and a Trace Event reader written here that nests complete
events by time alone), and what it holds is the store's, to the nanosecond: one slice per
iteration, layer, layer phase and launch, each launch's duration and (where the run stored it) its
start, and each stored counter's value on its launch, for one of our runs with counters, a
library-arm run with the real start times of a public trace, and an experiment's arms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from samples import sample_store, small_net
from timelines import check, expected, exported

import tracker.experiment
from tracker.cli import cli
from tracker.gpu.workload import Workload
from tracker.profile import profile_workload
from tracker.store import launch_rows, open_store
from tracker.store.queries import experiment_arm_runs


@pytest.mark.parametrize("fmt", ["perfetto", "chrome"])
def test_one_of_our_runs_with_counters_laid_end_to_end(fmt, tmp_path, runner):
    """The public K20c nvprof sample as our run: 12 launches in 3 iterations, 10 counters each,
    durations only, so laid end to end, and the file says so."""
    db = str(tmp_path / "t.db")
    run_id = sample_store(db)
    found = exported(runner, db, str(run_id), fmt, tmp_path)
    assert list(found) == [1] and "alexnet batch 1, ours, Tesla K20c" in found[1]["name"]
    check(found[1], open_store(db, write=False), run_id)
    assert sum(1 for s in found[1]["tracks"]["GPU"] if s[0] == 3) == 12 and len(found[1]["counters"]) >= 10
    if fmt == "chrome":
        notes = json.loads((tmp_path / "timeline.json").read_text())["otherData"]
        assert any("laid end to end" in note for note in notes.values())


@pytest.mark.slow  # the CPU emulation
@pytest.mark.parametrize("fmt", ["perfetto", "chrome"])
def test_a_library_run_keeps_the_real_starts_of_its_trace(fmt, gpu_seams, tmp_path, runner):
    """The library arm's launches carry the public A100 trace's own start times: gaps between
    kernels stay gaps on the timeline."""
    db = str(tmp_path / "t.db")
    workload = Workload.of(small_net(), 1, phases="fwd", repeat=2, warmup=0, implementation="torch")
    run_id = profile_workload(db, workload, backend="events").run_id
    store = open_store(db, write=False)
    starts = [k["start_ns"] for k in launch_rows(store, run_id)]
    assert None not in starts and starts[0] == 0 and starts == sorted(starts)
    found = exported(runner, db, str(run_id), fmt, tmp_path)
    check(found[1], store, run_id)
    launches = [s for s in found[1]["tracks"]["GPU"] if s[0] == 3]
    gaps = [b[2] - (a[2] + a[3]) for a, b in zip(launches, launches[1:])]
    assert max(gaps) > 0  # a real trace has idle time between some kernels
    assert len(found[1]["tracks"]) == 2  # cuDNN's FFT ran two transforms on two streams at once: a lane


@pytest.mark.slow  # the CPU emulation
@pytest.mark.parametrize("fmt", ["perfetto", "chrome"])
def test_an_experiment_is_one_process_per_arm_each_from_zero(fmt, gpu_seams, tmp_path, runner):
    db = str(tmp_path / "t.db")
    experiment = tracker.experiment.run_experiment(db, "library", small_net(), 1, repeat=2, warmup=0)
    store = open_store(db, write=False)
    arms = experiment_arm_runs(store, experiment)
    found = exported(runner, db, f"e{experiment}", fmt, tmp_path)
    assert sorted(found) == list(range(1, len(arms) + 1)) and len(arms) == 3
    for pid, (arm, run_id) in enumerate(arms, 1):
        assert found[pid]["name"].startswith(f"{arm}: run {run_id}:")
        check(found[pid], store, run_id)
        assert found[pid]["tracks"]["GPU"][0][2] == 0


def test_an_imported_report_is_laid_end_to_end_with_its_counters(tmp_path, runner):
    """The public V100 Nsight Compute report, imported: ncu's report holds no start times (it
    serializes the kernels it replays) and this one no durations either, so its launches are laid
    end to end at no width, each with its counters. (Perfetto's begin and end events nest them; a
    Trace Event reader cannot nest slices of no width at one instant, so only Perfetto's is read.)"""
    fmt = "perfetto"
    pytest.importorskip("ncu_report")
    db = str(tmp_path / "t.db")
    report = Path(__file__).parent / "data" / "ncu" / "ncu-report-v100-ncu2020.1-nvtx-dram.ncu-rep"
    assert runner.invoke(cli, ["import", str(report), "--db", db]).exit_code == 0
    found = exported(runner, db, "1", fmt, tmp_path)
    store = open_store(db, write=False)
    tracks, counters = expected(store, 1)
    assert found[1]["tracks"] == tracks and sum(1 for s in tracks["GPU"] if s[0] == 3) == 8
    assert {name: [v for _, v in steps] for name, steps in found[1]["counters"].items()} == {
        name: [v for _, v in values] for name, values in counters.items()
    }  # at one instant, one value a launch, in invocation order


def test_a_timeline_is_refused_in_one_line_where_it_cannot_be_written(tmp_path, runner):
    db = str(tmp_path / "t.db")
    sample_store(db)
    for args, message in (
        (["--format", "perfetto", "--out", str(tmp_path / "x.json")], "name a .pftrace file"),
        (["--format", "chrome", "--out", str(tmp_path / "nowhere" / "x.json")], "does not exist"),
        (["e9", "--format", "chrome"], "experiment"),
    ):
        done = runner.invoke(cli, ["export", *(args if args[0] == "e9" else ["1", *args]), "--db", db])
        assert done.exit_code != 0 and done.output.startswith("Error: ") and message in done.output, done.output
        assert len(done.output.strip().splitlines()) == 1
    target = tmp_path / "t.pftrace"
    target.write_text("keep me")
    done = runner.invoke(cli, ["export", "1", "--format", "perfetto", "--out", str(target), "--db", db])
    assert done.exit_code == 1 and "--force overwrites it" in done.output and target.read_text() == "keep me"
    done = runner.invoke(cli, ["export", "1", "--format", "perfetto", "--out", str(target), "--db", db, "--force"])
    assert done.exit_code == 0 and target.read_bytes() != b"keep me"
