"""`tracker import` of an Nsight Compute report: the public V100 report (tests/data/ncu/SOURCES.md),
read through NVIDIA's ncu-report, checked against what the same report's details page says
(ncu-details-v100-ncu2020.1-nvtx-dram.csv, exported by ncu itself), and read back as any run."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from tracker.cli import cli
from tracker.importers import FORMATS
from tracker.store import find_run, open_store, run_dict, run_sql

pytest.importorskip("ncu_report")

DATA = Path(__file__).parent / "data" / "ncu"
REPORT = DATA / "ncu-report-v100-ncu2020.1-nvtx-dram.ncu-rep"
DETAILS = DATA / "ncu-details-v100-ncu2020.1-nvtx-dram.csv"


def details() -> dict[int, dict]:
    """Per kernel ID: its name, and its metrics in their units, as ncu's own CSV gives them."""
    found: dict[int, dict] = {}
    for row in csv.DictReader(DETAILS.open()):
        kernel = found.setdefault(int(row["ID"]), {"name": row["Kernel Name"], "metrics": {}})
        kernel["metrics"][row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
    return found


def imported(runner, tmp_path: Path, *args: str) -> tuple[str, int]:
    db = str(tmp_path / "t.db")
    done = runner.invoke(cli, ["import", str(REPORT), "--db", db, "--format", "json", *args])
    assert done.exit_code == 0, done.output
    return db, json.loads(done.stdout)[0]["run_id"]


def test_every_kernel_of_the_report_is_a_launch_with_ncus_own_values(runner, tmp_path):
    db, run_id = imported(runner, tmp_path)
    store = open_store(db, write=False)
    expected = details()
    _, launches = run_sql(store, f"SELECT invocation, kernel_name FROM launch WHERE run_id = {run_id}")
    assert [(i, name) for i, name in launches] == [(i, expected[i]["name"]) for i in sorted(expected)]
    _, values = run_sql(store, f"SELECT invocation, name, value FROM metric WHERE run_id = {run_id}")
    stored = {(i, name): value for i, name, value in values}
    for i, kernel in expected.items():  # ncu's names, the catalog's: cycles_elapsed, sm_clock_hz
        assert stored[i, "cycles_elapsed"] == pytest.approx(kernel["metrics"]["sm__cycles_elapsed.avg"])
        assert stored[i, "sm_clock_hz"] == pytest.approx(kernel["metrics"]["sm__cycles_elapsed.avg.per_second"])
    _, sources = run_sql(store, f"SELECT name, source FROM metric_source WHERE run_id = {run_id} ORDER BY name")
    assert ("cycles_elapsed", "sm__cycles_elapsed.avg") in sources
    run = run_dict(find_run(store, run_id))
    assert (run["implementation"], run["backend"], run["device_name"]) == ("imported", "ncu", "Tesla V100-SXM2-16GB")
    assert run["compute_capability"] == "7.0" and run["sm_count"] == 80
    assert run["library"]["file"] == str(REPORT.resolve()) and run["library"]["format"] == "ncu-rep"
    assert "predictions blank" in run["backend_reason"]


def test_the_innermost_range_is_the_layer_and_each_instance_of_it_an_iteration(runner, tmp_path):
    """Every kernel runs inside GENE/.../eRK_stage_N/CalFRhs0/dgdxy: one layer, dgdxy, met anew in
    each of four stages, two kernels each."""
    db, run_id = imported(runner, tmp_path)
    _, rows = run_sql(
        open_store(db, write=False),
        f"SELECT l.name, k.repeat, COUNT(*) FROM launch k JOIN layer l "
        f"ON l.run_id = k.run_id AND l.layer_id = k.layer_id WHERE k.run_id = {run_id} "
        "GROUP BY l.name, k.repeat ORDER BY k.repeat",
    )
    assert rows == [("dgdxy", r, 2) for r in range(4)]


def test_layers_regex_picks_the_range_that_names_a_layer(runner, tmp_path):
    db, run_id = imported(runner, tmp_path, "--layers", r"eRK_stage_(\d+)")
    store = open_store(db, write=False)
    _, rows = run_sql(store, f"SELECT layer, phase, launches FROM layer_phase WHERE run_id = {run_id}")
    assert rows == [(str(n), "fwd", 2) for n in range(1, 5)]


@pytest.mark.parametrize("command", [["show"], ["export", "--format", "csv"], ["export", "--format", "perfetto"]])
def test_an_imported_run_reads_as_any_other(runner, tmp_path, command):
    db, run_id = imported(runner, tmp_path)
    out = tmp_path / ("out.pftrace" if "perfetto" in command else "out")
    args = [command[0], str(run_id), *command[1:], "--db", db, *([] if command == ["show"] else ["--out", str(out)])]
    done = runner.invoke(cli, args)
    assert done.exit_code == 0, done.output
    if command == ["show"]:
        assert "imported" in done.output and "dgdxy" in done.output


@pytest.mark.slow  # draws the report's figures
def test_an_imported_runs_report_says_who_ran_it_and_how_to_get_more(runner, tmp_path):
    db, run_id = imported(runner, tmp_path)
    done = runner.invoke(cli, ["report", str(run_id), "--db", db, "--out", str(tmp_path / "r")])
    assert done.exit_code == 0, done.output
    page = (tmp_path / "r" / "report.md").read_text()
    assert "run by another tool: ncu-report-v100-ncu2020.1-nvtx-dram.ncu-rep" in page
    assert "tracker import profile.ncu-rep" in page and "--impl imported" not in page


def test_a_tracker_network_needs_its_own_layer_names(runner, tmp_path):
    done = runner.invoke(cli, ["import", str(REPORT), "--network", "alexnet", "--db", str(tmp_path / "t.db")])
    assert done.exit_code == 1 and "no launch ran in a layer of alexnet" in done.output, done.output
    assert not (tmp_path / "t.db").exists()


def hostile(tmp_path: Path) -> list[tuple[Path, str]]:
    junk = tmp_path / "junk.ncu-rep"
    junk.write_bytes(b"\x00not a report" * 100)
    truncated = tmp_path / "truncated.ncu-rep"
    truncated.write_bytes(REPORT.read_bytes()[: REPORT.stat().st_size // 2])
    empty = tmp_path / "empty.ncu-rep"
    empty.write_bytes(b"")
    other = tmp_path / "profile.qdrep"
    shutil.copyfile(REPORT, other)
    return [
        (junk, "holds no profiled kernel"),
        (truncated, "holds no profiled kernel"),
        (empty, "holds no profiled kernel"),
        (other, f"tracker reads {', '.join(FORMATS)} files"),
        (tmp_path / "missing.ncu-rep", "no such file"),
    ]


def test_a_file_that_is_no_report_is_refused_in_one_line_and_stores_nothing(runner, tmp_path):
    db = tmp_path / "t.db"
    for path, message in hostile(tmp_path):
        done = runner.invoke(cli, ["import", str(path), "--db", str(db)])
        assert done.exit_code == 1 and message in done.output, done.output
        assert len(done.output.strip().splitlines()) == 1 and not db.exists()
    done = runner.invoke(cli, ["import", str(REPORT), "--layers", "(", "--db", str(db)])
    assert done.exit_code == 1 and "is not a regular expression" in done.output and not db.exists()


def test_tracker_range_names_are_layers_and_phases_of_its_network_with_the_models_predictions(
    runner, tmp_path, monkeypatch
):
    """A report of tracker's own kernels (as `ncu` profiles them: ranges 'conv1/fwd', ...): with
    --network its layers and phases are the network's, each repeated range an iteration, and the
    model predicts for the report's GPU."""
    from tracker.importers import Imported, ImportedLaunch
    from tracker.nets import build

    order = [f"{layer.name}/{phase}" for layer, phase in build("alexnet").training_order("both")]
    launches = [
        ImportedLaunch(f"k_{name}", ("step", name), (1, 1, 1), (32, 1, 1), 32, 0, 0.5, metrics={"duration_ns": 5e5})
        for _ in range(2)
        for name in order
    ]
    report = Imported(
        "made.ncu-rep",
        "ncu-rep",
        "ncu",
        "ncu 2025.3.1",
        "NVIDIA H100 80GB HBM3",
        "9.0",
        132,
        {},
        launches,
        {"duration_ns": "gpu__time_duration.sum"},
    )
    monkeypatch.setattr("tracker.importers.formats.read", lambda path: report)
    db = str(tmp_path / "t.db")
    done = runner.invoke(cli, ["import", "made.ncu-rep", "--network", "alexnet", "--batch", "16", "--db", db])
    assert done.exit_code == 0, done.output
    store = open_store(db, write=False)
    _, rows = run_sql(
        store, "SELECT layer, phase, launches, measured_ms, predicted_ms FROM layer_phase WHERE run_id = 1"
    )
    assert {(f"{layer}/{phase}", n, ms) for layer, phase, n, ms, _ in rows} == {(name, 1, 0.5) for name in order}
    assert all(predicted is not None and predicted > 0 for *_, predicted in rows)
    run = run_dict(find_run(store, 1))
    assert (run["network"], run["batch"], run["repeat"], run["counter_iterations"]) == ("alexnet", 16, 2, 2)


RAW_NVTX = DATA / "ncu-raw-nvtx-h100-sm90-ncu2025.3-alexnet-b1.csv"  # our AlexNet at batch 1, ncu --nvtx


def test_the_reports_csv_page_imports_the_same_kernels_and_counters_as_the_report(runner, tmp_path):
    """The V100 report and the details page ncu exported from it, read by two different readers
    (NVIDIA's ncu-report, tracker's CSV parser): the same kernels in the same order, the same counters."""
    db, from_report = imported(runner, tmp_path)
    done = runner.invoke(cli, ["import", str(DETAILS), "--db", db, "--format", "json"])
    assert done.exit_code == 0, done.output
    from_page = json.loads(done.stdout)[0]["run_id"]
    store = open_store(db, write=False)
    sql = "SELECT k.invocation, k.kernel_name, m.name, m.value FROM launch k JOIN metric m ON m.run_id = k.run_id "
    sql += "AND m.invocation = k.invocation WHERE k.run_id = {} ORDER BY k.invocation, m.name"
    _, report = run_sql(store, sql.format(from_report))
    _, page = run_sql(store, sql.format(from_page))
    in_page = {(i, kernel, name): value for i, kernel, name, value in page}
    shared = [(i, kernel, name, value) for i, kernel, name, value in report if (i, kernel, name) in in_page]
    assert len(shared) == len(page) == 8 * 2  # every counter of the page: cycles_elapsed, sm_clock_hz
    for i, kernel, name, value in shared:
        assert in_page[i, kernel, name] == pytest.approx(value, rel=1e-3), (i, name)


def test_a_raw_pages_nvtx_ranges_are_tracker_layer_phases_with_the_pages_own_times(runner, tmp_path):
    db = str(tmp_path / "t.db")
    done = runner.invoke(cli, ["import", str(RAW_NVTX), "--network", "alexnet", "--db", db, "--format", "json"])
    assert done.exit_code == 0, done.output
    rows = list(csv.reader(RAW_NVTX.open()))
    header = rows[0]
    kernels = [r for r in rows[2:] if r and r[0]]
    times = [float(r[header.index("gpu__time_duration.sum")].replace(",", "")) for r in kernels]
    store = open_store(db, write=False)
    _, stored = run_sql(
        store,
        "SELECT l.name || '/' || k.phase, k.time_ms FROM launch k JOIN layer l ON l.run_id = k.run_id "
        "AND l.layer_id = k.layer_id WHERE k.run_id = 1 ORDER BY k.invocation",
    )
    assert [ms for _, ms in stored] == pytest.approx([t / 1e6 for t in times])
    nvtx = next(i for i, name in enumerate(header) if name.startswith("thread Domain:Push/Pop_Range"))
    assert [name for name, _ in stored] == [r[nvtx].split(":")[1] for r in kernels]
    run = run_dict(find_run(store, 1))
    assert (run["device_name"], run["compute_capability"], run["backend"]) == ("NVIDIA H100 80GB HBM3", "9.0", "ncu")


def test_a_csv_that_is_no_ncu_page_is_refused_in_one_line_and_stores_nothing(runner, tmp_path, monkeypatch):
    cases = {
        "junk.csv": b"a,b,c\n1,2,3\n",
        "empty.csv": b"",
        "binary.csv": b"\xff\xfe\x00garbage" * 100,
        "cut.csv": RAW_NVTX.read_bytes()[:3000],
        "nvprof.csv": (DATA / "nvprof-gputrace-csv-k20c.csv").read_bytes(),
    }
    db = tmp_path / "t.db"
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        done = runner.invoke(cli, ["import", str(tmp_path / name), "--db", str(db)])
        refused = "cannot read" in done.output or "no profiled kernel" in done.output
        assert done.exit_code == 1 and refused, (name, done.output)
        assert len(done.output.strip().splitlines()) == 1 and not db.exists(), (name, done.output)
    monkeypatch.setattr("tracker.importers.ncu_page.MOST_BYTES", 1000)
    done = runner.invoke(cli, ["import", str(RAW_NVTX), "--db", str(db)])
    assert done.exit_code == 1 and "GiB of CSV" in done.output and not db.exists()


def test_our_own_runs_report_page_imported_agrees_with_the_run_at_every_counter(runner, tmp_path):
    """The raw page of the ncu report our batch-16 H100 run was stored from (RECORDINGS.md), imported
    beside that run onto tracker's AlexNet: every one of its 80 counters agrees with the run's at
    every launch, to the digit; each launch's time is ncu's duration of it, which the run stored as
    a counter (its own times are pass 1's CUDA events, unprofiled), and compare sees no change in
    any counter it reports."""
    db = tmp_path / "t.db"
    shutil.copyfile(DATA.parent / "alexnet-b16-nvidia-h100-80gb-hbm3.db", db)
    page = DATA / "ncu-raw-h100-sm90-ncu2025.3-alexnet-b16.csv"
    done = runner.invoke(cli, ["import", str(page), "--network", "alexnet", "--batch", "16", "--db", str(db)])
    assert done.exit_code == 0, done.output
    agreed = runner.invoke(cli, ["agree", "1", "2", "--db", str(db), "--format", "json"])
    assert agreed.exit_code == 0, agreed.output
    verdicts = json.loads(agreed.stdout)
    assert len(verdicts) == 80 and all(v["agrees"] and v["worst_diff"] == 0 for v in verdicts)
    _, times = run_sql(
        open_store(str(db), write=False),
        "SELECT k.time_ms, m.value FROM launch k JOIN metric m ON m.run_id = 1 AND m.invocation = k.invocation "
        "AND m.name = 'duration_ns' WHERE k.run_id = 2 ORDER BY k.invocation",
    )
    assert len(times) == 57 and all(ms == pytest.approx(ns / 1e6) for ms, ns in times)
    compared = runner.invoke(cli, ["compare", "1", "2", "--db", str(db), "--format", "json"])
    assert compared.exit_code == 0, compared.output
    rows = [row for row in json.loads(compared.stdout) if row["layer"] != "iteration"]
    assert len(rows) == 49 and all(row["first_reason_a"] == row["first_reason_b"] for row in rows)
    assert all(not row["l2_hit_rate_change"] and not row["fp32_inst_change"] for row in rows)
