"""tracker report, export, compare and experiments from the command line, on the test store
(samples.sample_store: public K20c counters, labelled) and model runs of AlexNet."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from samples import sample_store, v100_sample_store

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
    result = CliRunner().invoke(
        cli,
        [
            "experiment",
            "batch",
            "alexnet",
            "--batches",
            "16,128",
            "--backend",
            "model",
            "--device",
            "h100",
            "--db",
            path,
        ],
    )
    assert result.exit_code == 0, result.output  # experiment e1: runs 4, 5
    assert v100_sample_store(path) == 6
    return path


def test_run_report_draws_what_the_run_holds_and_says_what_it_lacks(runner, db, tmp_path):
    result = runner.invoke(cli, ["report", "1", "--db", db, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    drawn = {p.stem for p in tmp_path.glob("*.png")}
    # The K20c excerpt times 12 launches and samples their stalls and traffic: the roofline places
    # the model's FLOPs over those times. It stores no prediction of its peak memory: no memory figure.
    assert (
        drawn == {"runtime", "roofline", "efficiency", "stalls", "traffic"} == {p.stem for p in tmp_path.glob("*.svg")}
    )
    page = (tmp_path / "index.html").read_text()
    assert set(re.findall(r"<img src='(\w+)\.svg'", page)) == drawn
    assert (
        "4 sections need hardware counters, which this run did not collect: FP32 instructions, ALU / pipe "
        "utilization, Cache hit rates, Utilization per memory level."
    ) in page
    assert "<code>tracker profile alexnet --batch 1 --backend ncu</code>" in page
    md = (tmp_path / "report.md").read_text()
    assert "**Finding:** pool1 fwd: top stalls memory_dependency, exec_dependency -> memory-bound" in md
    assert (
        "alexnet at batch 1 on Tesla K20c, measured with nvprof on all 3 measured iterations; kernel variants: "
        "the default of each op"
    ) in md
    # The K20c's roofs are the catalog's (3.52 TFLOP/s over 208 GB/s: the ridge at 16.9 FLOP/B).
    assert (
        "**Finding:** fastest: conv1 fwd at 26.6 GFLOP/s, 0.756% of the FP32 roof; 3 of 4 layer phases lie "
        "left of the DRAM ridge (16.9 FLOP/B): memory-bound"
    ) in md
    # each paper is named where the page first uses its number, and listed at the end
    # headings name a paper by number alone; each paper is cited once, in the list at the end
    assert "_paper 003, Figures 10/11_" in md and "_paper 000_" in md
    assert md.count("Dong, Gong, Sun, Baruah and Kaeli") == 1 and md.count("Salim, Dawwd and Ali") == 1
    assert md.rstrip().endswith(
        "- paper 003: Dong, Gong, Sun, Baruah and Kaeli, Characterizing the "
        "Microarchitectural Implications of a Convolutional Neural Network (CNN) Execution "
        "on GPUs (ICPE'18)"
    )
    # paper 001's figure: 4 timed layer phases, pool1's the largest share of their time
    assert "**Finding:** pool1 fwd takes 25.0% of the step at 0.00225% of the FP32 peak" in md
    assert "None" not in md and "nan" not in md.lower().replace("nanosecond", "")


def test_the_v100_sample_draws_fp_stalls_and_hit_rates(runner, db, tmp_path):
    result = runner.invoke(cli, ["report", "6", "--db", db, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert {p.stem for p in tmp_path.glob("*.svg")} == {
        "runtime",
        "roofline",
        "efficiency",
        "fp_instructions",
        "stalls",
        "cache_hit_rates",
        "traffic",
    }  # no stored peak
    md = (tmp_path / "report.md").read_text()
    assert "**Finding:** fma is 97.7% of FP32 instructions; most in conv2 fwd" in md  # 5.6236e10 of 5.7557e10
    assert (
        "**Finding:** hit rates: L1/TEX 52.7% to 52.7% (lowest conv2 fwd); L2 24.8% to 24.8% (lowest conv2 fwd)" in md
    )
    assert "conv2 fwd: top stalls inst_fetch, memory_dependency -> latency-bound" in md
    # The excerpt has no duration: time and roofline are the model's for the V100, and say why.
    assert "(predicted by the model: no launch times were recorded)" in md
    # five conv phases are compute-bound at the roof: a tie, not conv1's alone
    assert (
        "**Finding:** fastest: conv1 fwd = conv2 fwd = conv3 fwd and 2 more (tie) at 15.7 TFLOP/s, 100% of the "
        "FP32 roof; 16 of 21 layer phases lie left of the DRAM ridge (17.4 FLOP/B): memory-bound"
    ) in md


def test_model_report_gives_runtime_and_the_models_roofline(runner, db, tmp_path):
    result = runner.invoke(cli, ["report", "2", "--against", "3", "--db", db, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert {p.stem for p in tmp_path.glob("*.png")} == {
        "speedup",
        "efficiency_side_by_side",
        "roofline_moves",
        "runtime",
        "roofline",
        "efficiency",
        "memory",
    }
    md = (tmp_path / "report.md").read_text()
    # run 2 (H100) against run 3 (A100), each by the default plan's algorithms: 18.75 / 6.20 ms
    assert "## Speedup of run 2 over run 3, per batch" in md and "whole iteration +202.2%" in md
    assert "Fill them with `tracker profile alexnet --batch 128 --backend ncu` on a GPU." in md
    assert "[Roofline moves: run 3 -> run 2](#roofline-moves-run-3---run-2)" in md
    # paper 001's figure, both runs side by side: the model runs conv1 at the FP32 peak on either GPU
    assert (
        "**Finding:** run 3: ours: conv1 fwd takes 7.38% of the step at 100% of the FP32 peak; "
        "run 2: ours: conv1 fwd takes 6.50% of the step at 100% of the FP32 peak"
    ) in md


def test_a_report_reads_each_runs_settings_once(db, monkeypatch, tmp_path):
    """The report reads a run's settings once (run_report.ReportedRun) and hands them to every section and
    to the comparison, rather than each of them reading the run again."""
    from tracker.report import report, run_report
    from tracker.store import open_store

    reads = []
    read = run_report.run_row
    monkeypatch.setattr(run_report, "run_row", lambda store, run_id: reads.append(run_id) or read(store, run_id))
    report(open_store(db, write=False), "2", tmp_path, against="3")
    assert reads == [2, 3]


def test_experiment_report_and_list(runner, db, tmp_path):
    result = runner.invoke(cli, ["report", "e1", "--db", db, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "batch_runtime.svg").exists()
    md = (tmp_path / "report.md").read_text()
    assert "## Time per image per layer at batch 16, 128" in md
    assert "batch 16: 57.4 µs (17.4k images/s), batch 128: 48.5 µs (20.6k images/s)" in md
    assert "alexnet at batches 16, 128 on H100 SXM5 80GB" in md
    listed = runner.invoke(cli, ["experiments", "--db", db, "--format", "json"])
    assert '"runs": "4,5"' in listed.output and '"kind": "batch"' in listed.output


def test_compare_cli_and_its_refusal(runner, db):
    ok = runner.invoke(cli, ["compare", "2", "3", "--db", db, "--format", "csv"])
    assert ok.exit_code == 0, ok.output
    rows = list(pd.read_csv(__import__("io").StringIO(ok.output)).itertuples())
    assert rows[-1].layer == "iteration" and rows[-1].speedup == pytest.approx(6.204593327247172 / 18.747762375678775)
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
    for args, message in (
        (["report", "e9"], "no experiment 9"),
        (["report", "x"], "is not a run id"),
        (["export", "7"], "no run 7"),
        (["experiment", "batch", "alexnet", "--batches", "16,x"], "'x' is not a whole number"),
    ):
        result = runner.invoke(
            cli, [*args, "--db", db, "--out", str(tmp_path)] if args[0] != "experiment" else [*args, "--db", db]
        )
        assert result.exit_code != 0 and message in result.output and result.output.count("\n") == 1, result.output


def test_report_on_a_run_without_a_device_beside_one_with(runner, tmp_path):
    """The run table's device_name is NaN for a model run without --device once another run has
    one: the report reads runs as the store decodes them (None), and says 'no device'."""
    path = str(tmp_path / "trace.db")
    profile(path, build("alexnet"), 16, backend="model")  # run 1: no device
    profile(path, build("alexnet"), 16, backend="model", device=lookup("h100"))  # run 2
    result = runner.invoke(cli, ["report", "1", "--db", path, "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    md = (tmp_path / "r" / "report.md").read_text()
    assert "# Run 1: alexnet, batch 16, no device" in md and "modelled without a device" in md
    assert "nan" not in md.lower().replace("nanosecond", "")


def test_report_on_a_run_interrupted_before_it_met_its_gpu(runner, tmp_path, monkeypatch):
    """H100, 2026-11-25 (7-report-interrupted.log): `tracker report last` on a run that SIGTERM
    ended with no layer, no launch and no device recorded ended in 'internal error: TypeError:
    unsupported operand type(s) for +: 'NoneType' and 'str''. The same run made here (the ncu
    path of `tracker profile`, SIGTERM arriving in pass 1, which needs a GPU and is stood in)
    reports, shows and lists, and each says what it holds."""
    import os
    import signal
    import time

    import tracker.gpu.runner
    import tracker.profile
    from tracker.errors import Interrupted
    from tracker.profile import Choice

    def terminated(workload, echo):
        os.kill(os.getpid(), signal.SIGTERM)  # as `timeout 200` sent it
        time.sleep(30)

    monkeypatch.setattr(
        tracker.profile,
        "choose_backend",
        lambda requested, options, implementations=(): Choice("ncu", "ncu 2025.3.1.0 found", object()),
    )
    monkeypatch.setattr(tracker.gpu.runner, "profile_events", terminated)
    path = str(tmp_path / "trace.db")
    with pytest.raises(Interrupted):
        profile(path, build("alexnet"), 128)
    result = runner.invoke(cli, ["report", "last", "--db", path, "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    held = "this run was interrupted (Ctrl-C or SIGTERM) before pass 1 stored any launch: it holds no measurement"
    md = (tmp_path / "r" / "report.md").read_text()
    assert "# Run 1: alexnet, batch 128, no device" in md
    assert (
        "alexnet at batch 128 on a GPU not recorded (the run ended before pass 1 reached it), profiled with "
        "ncu, whose pass 2 stored no counters;"
    ) in md
    assert "Run 1, interrupted, " in md and f"{held[0].upper()}{held[1:]}." in md and f"\n  {held}\n" in result.output
    assert "None" not in md and "nan" not in md.lower().replace("nanosecond", "")
    shown = runner.invoke(cli, ["show", "last", "--db", path])
    assert shown.exit_code == 0 and f"\n{held}\n" in shown.output
    listed = runner.invoke(cli, ["runs", "--db", path, "--format", "json"])
    assert [(r["status"], r["layers"], r["launches"], r["device_name"]) for r in json.loads(listed.output)] == [
        ("interrupted", 0, 0, None)
    ]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def fresh_db(request, tmp_path):
    """conftest's ``db`` (shadowed here by the sample store): a new SQLite file, then PostgreSQL."""
    return str(tmp_path / "trace.db") if request.param == "sqlite" else request.getfixturevalue("pg_url")


def test_memory_finding_rebuilds_the_network_with_its_options(runner, fresh_db, tmp_path):
    """PostgreSQL hands network_options back as a dict, SQLite as JSON text: both are the store's
    to decode, and the memory figure is the model's for the network that ran (separable, here)."""
    from tracker import units
    from tracker.model import memory

    separable = build("unet2d", conv_type="separable")
    profile(fresh_db, separable, 2, backend="model", device=lookup("h100"))
    result = runner.invoke(cli, ["report", "last", "--db", fresh_db, "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    peak = memory(separable, 2, 32).peak_bytes
    assert peak != memory(build("unet2d"), 2, 32).peak_bytes  # the options matter to the figure
    assert f"GPU memory: the model's {units.nbytes(peak)}\n" in result.output
    assert f"**Finding:** the model's {units.nbytes(peak)}" in (tmp_path / "r" / "report.md").read_text()


def test_the_command_that_fills_the_counters_rebuilds_the_same_network(runner, tmp_path):
    """A U-Net built with options of its own is profiled with them again, not with the defaults."""
    db = str(tmp_path / "t.db")
    done = runner.invoke(
        cli,
        ["profile", "unet3d", "--batch", "1", "--input-size", "32", "--base-filters", "4", "--depth", "2", "--db", db],
    )
    assert done.exit_code == 0, done.output
    result = runner.invoke(cli, ["report", "1", "--db", db, "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert (
        "`tracker profile unet3d --batch 1 --input-size 32x32x32 --base-filters 4 --depth 2 --backend ncu`"
        in result.output
    )


def test_no_report_is_written_over_another_without_force(runner, db, tmp_path):
    """An experiment's report into run 1's report folder is refused in one line and touches
    nothing; with --force it is written, and the run's figures go (said on stderr). The same
    report again is an update. A folder holding files tracker did not write is refused too, and
    with --force keeps them."""
    out = tmp_path / "report"
    assert runner.invoke(cli, ["report", "1", "--db", db, "--out", str(out)]).exit_code == 0
    before = {path.name: path.stat().st_mtime_ns for path in out.iterdir()}
    assert "stalls.svg" in before
    refused = runner.invoke(cli, ["report", "e1", "--db", db, "--out", str(out)])
    assert refused.exit_code == 1 and refused.stdout == ""
    assert refused.stderr == (
        f"Error: {out} holds run 1's report of {db}: name another --out, or add --force "
        "to write experiment e1's report there\n"
    )
    assert {path.name: path.stat().st_mtime_ns for path in out.iterdir()} == before
    again = runner.invoke(cli, ["report", "1", "--db", db, "--out", str(out)])
    assert again.exit_code == 0 and "removed" not in again.stderr
    forced = runner.invoke(cli, ["report", "e1", "--db", db, "--out", str(out), "--force"])
    assert forced.exit_code == 0, forced.output
    assert not (out / "stalls.svg").exists() and not (out / "stalls.png").exists()
    assert f"removed 10 figure files an earlier report left in {out}" in forced.stderr
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "holiday.png").write_bytes(b"not a report's")
    refused = runner.invoke(cli, ["report", "1", "--db", db, "--out", str(mine)])
    assert refused.exit_code == 1 and "holds files tracker did not write" in refused.stderr
    assert runner.invoke(cli, ["report", "1", "--db", db, "--out", str(mine), "--force"]).exit_code == 0
    assert (mine / "holiday.png").read_bytes() == b"not a report's" and (mine / "index.html").exists()


def test_tables_have_human_headers_and_no_blank_column(runner, db, tmp_path):
    """A model run has no spread and no launches: those columns are left out, not left blank; a
    header names its quantity, which its cells carry in their own unit."""
    result = runner.invoke(cli, ["report", "2", "--db", db, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    md = (tmp_path / "report.md").read_text()
    runtime = md[md.index("## Time per layer") : md.index("## Roofline")]
    head = next(line for line in runtime.splitlines() if line.startswith("| layer"))
    assert head == "| layer | phase | time | predicted (time) | source |"
    assert "[![Time per layer](runtime.png)](runtime.svg)" in md
    assert result.output.startswith("4 figures of 11 sections in ")


def test_an_experiments_settings_are_those_that_apply_to_its_arms(runner, db, tmp_path):
    """e1 swept batches 16 and 128 on the model: its settings say so, and name no single batch and
    no ncu setting."""
    result = runner.invoke(cli, ["report", "e1", "--db", db, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    md = (tmp_path / "report.md").read_text()
    settings = md[md.index("## Settings") : md.index("## Time per image")]
    assert "| batches | 16, 128 |" in settings
    assert "\n| batch |" not in settings and "ncu" not in settings and "| variants |" not in settings


def test_a_section_with_nothing_to_show_is_left_out_with_why(runner, tmp_path):
    """A model run without a device has no times: its time, roofline and efficiency sections are
    not drawn as empty headings; one line names them and why."""
    db = str(tmp_path / "t.db")
    profile(db, build("alexnet"), 4, backend="model")
    result = runner.invoke(cli, ["report", "1", "--db", db, "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert "  Roofline: left out, nothing to show (no times and no counters to place;" in result.output
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## Time per layer" not in md and "## Roofline" not in md and "## GPU memory" in md
    assert "_Left out, with nothing to show: Time per layer (a model run without a device has no times;" in md


def test_the_roofline_says_which_layer_phases_it_leaves_out(runner, tmp_path):
    """The fused run of the H100 fusion recording: its 14 fused ReLU phases launched nothing, so
    have no point, and the finding and the figure's note say so (as for --torch's uncounted ops)."""
    from recorded import FUSION_NCU, recording

    from tracker.analysis import roofline
    from tracker.store import open_store

    db = recording(FUSION_NCU, tmp_path)
    points, _ = roofline.chart(open_store(db, write=False), 2)
    assert len(points.attrs["left_out"]) == 14 and ("relu1", "fwd") in points.attrs["left_out"]
    result = runner.invoke(cli, ["report", "2", "--db", db, "--out", str(tmp_path / "r")])
    assert "14 layer phases not shown (launched nothing, or no FLOPs or bytes counted)" in result.output
