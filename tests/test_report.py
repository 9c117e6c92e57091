"""tracker report, export, compare and experiments from the command line, on the test store
(test_views.sample_store: public K20c counters, labelled) and model runs of AlexNet."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from test_views import sample_store, v100_sample_store

from tracker.cli import cli
from tracker.model import lookup
from tracker.nets import build
from tracker.profile import profile
from tracker.store.views import VIEWS


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    from click.testing import CliRunner

    path = str(tmp_path_factory.mktemp("report") / "trace.db")
    sample_store(path)  # run 1
    for device in ("h100", "a100"):  # runs 2, 3
        profile(path, build("alexnet"), 128, backend="model", device=lookup(device))
    result = CliRunner().invoke(cli, ["experiment", "batch", "alexnet", "--batches", "16,128", "--backend", "model",
                                      "--device", "h100", "--db", path])
    assert result.exit_code == 0, result.output  # experiment e1: runs 4, 5
    assert v100_sample_store(path) == 6
    return path


def test_run_report_draws_what_the_run_holds_and_says_what_it_lacks(runner, db, tmp_path):
    result = runner.invoke(cli, ["report", "1", "--db", db, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    drawn = {p.stem for p in tmp_path.glob("*.png")}
    assert drawn == {"runtime", "stalls", "traffic"} == {p.stem for p in tmp_path.glob("*.svg")}
    page = (tmp_path / "index.html").read_text()
    assert set(re.findall(r"<img src='(\w+)\.svg'", page)) == drawn
    assert "Not drawn: run 1 (backend nvprof) did not collect these counters" in page
    md = (tmp_path / "report.md").read_text()
    assert "**Finding:** pool1 fwd: top stalls memory_dependency, exec_dependency -> memory-bound" in md
    assert "alexnet, batch 1, Tesla K20c, backend nvprof (run 1)" in md


def test_the_v100_sample_draws_fp_stalls_and_hit_rates(runner, db, tmp_path):
    result = runner.invoke(cli, ["report", "6", "--db", db, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert {p.stem for p in tmp_path.glob("*.svg")} == {"fp_instructions", "stalls", "cache_hit_rates", "traffic"}
    md = (tmp_path / "report.md").read_text()
    assert "**Finding:** fma is 98% of FP32 instructions; most in conv2 fwd" in md  # 5.6236e10 of 5.7557e10
    assert "**Finding:** hit rates: L1/TEX 53-53% (lowest conv2 fwd); L2 25-25% (lowest conv2 fwd)" in md
    assert "conv2 fwd: top stalls inst_fetch, memory_dependency -> latency-bound" in md
    assert "no launch times were recorded" in md  # the excerpt has no duration


def test_model_report_gives_runtime_and_the_models_roofline(runner, db, tmp_path):
    result = runner.invoke(cli, ["report", "2", "--against", "3", "--db", db, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert {p.stem for p in tmp_path.glob("*.png")} == {"speedup", "runtime", "roofline"}
    md = (tmp_path / "report.md").read_text()
    assert "## Speedup of run 3 over run 2 (Figure 8)" in md and "whole iteration -69.5%" in md
    assert "no counters in run 2 (backend model); profile with --backend ncu on a GPU" in md


def test_experiment_report_and_list(runner, db, tmp_path):
    result = runner.invoke(cli, ["report", "e1", "--db", db, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "batch_runtime.svg").exists()
    assert "batch 16: 116 us, batch 128: 108 us" in (tmp_path / "report.md").read_text()
    listed = runner.invoke(cli, ["experiments", "--db", db, "--format", "json"])
    assert '"runs": "4,5"' in listed.output and '"kind": "batch"' in listed.output


def test_compare_cli_and_its_refusal(runner, db):
    ok = runner.invoke(cli, ["compare", "2", "3", "--db", db, "--format", "csv"])
    assert ok.exit_code == 0, ok.output
    rows = list(pd.read_csv(__import__("io").StringIO(ok.output)).itertuples())
    assert rows[-1].layer == "iteration" and rows[-1].speedup == pytest.approx(13.846230853581421 / 45.32732394045829)
    bad = runner.invoke(cli, ["compare", "1", "2", "--db", db])
    assert bad.exit_code == 1 and bad.output.count("\n") == 1
    assert "runs 1 and 2 ran different phases" in bad.output


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_writes_every_view_of_the_run(runner, db, tmp_path, fmt):
    result = runner.invoke(cli, ["export", "1", "--db", db, "--out", str(tmp_path), "--format", fmt])
    assert result.exit_code == 0, result.output
    read = pd.read_csv if fmt == "csv" else pd.read_parquet
    for view in VIEWS:
        assert (tmp_path / f"{view.name}.{fmt}").exists(), view.name
    launches = read(tmp_path / f"launch_metrics.{fmt}")
    assert len(launches) == 12 and set(launches.run_id) == {1}
    assert read(tmp_path / f"run.{fmt}").id.tolist() == [1]


def test_bad_targets_are_one_line_errors(runner, db, tmp_path):
    for args, message in ((["report", "e9"], "no experiment 9"), (["report", "x"], "is not a run id"),
                          (["export", "7"], "no run 7"), (["experiment", "batch", "alexnet", "--batches", "16,x"],
                                                           "not a comma-separated list")):
        result = runner.invoke(cli, [*args, "--db", db, "--out", str(tmp_path)] if args[0] != "experiment"
                               else [*args, "--db", db])
        assert result.exit_code != 0 and message in result.output and result.output.count("\n") == 1, result.output
