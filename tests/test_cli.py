"""The CLI through click's runner, plus one smoke test of the installed `tracker` command."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tracker.cli import cli
from tracker.model import predict
from tracker.nets import build

README = (Path(__file__).parents[1] / "README.md").read_text()
COMMANDS = sorted(cli.commands)


def run(runner, *args, ok=True):
    result = runner.invoke(cli, [str(a) for a in args])
    if ok:
        assert result.exit_code == 0, (args, result.output, result.exception)
    return result


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example_and_is_in_the_readme(runner, command):
    text = run(runner, command, "--help").output
    assert "Example" in text and f"tracker {command}" in text
    assert f"tracker {command}" in README


def test_version_and_top_level_help(runner):
    assert "tracker, version" in run(runner, "--version").output
    text = run(runner, "--help").output
    assert all(command in text for command in COMMANDS)


def test_model_json_has_per_layer_ops_in_paper_003_convention(runner):
    rows = json.loads(run(runner, "model", "alexnet", "--batch", 1, "--format", "json").output)
    assert {
        "layer_id",
        "layer",
        "kind",
        "phase",
        "output_shape",
        "params",
        "macs",
        "ops",
        "bytes",
        "intensity",
        "convention",
    } <= set(rows[0])
    fwd = {r["layer"]: r for r in rows if r["phase"] == "fwd"}
    assert fwd["conv1"]["ops"] == 210_830_400 and fwd["conv1"]["output_shape"] == [96, 55, 55]
    assert fwd["fc6"]["ops"] == 75_497_472
    assert "attainable_gflops" not in rows[0]


def test_model_with_a_device(runner):
    rows = json.loads(run(runner, "model", "alexnet", "-b", 128, "--device", "H100-SXM", "--format", "json").output)
    assert {r["bound"] for r in rows} == {"compute", "memory"}
    assert all(r["predicted_ms"] > 0 and r["attainable_gflops"] > 0 for r in rows)
    table = run(runner, "model", "alexnet", "-b", 128, "--device", "h100").output
    assert "bound" in table and "ms predicted on H100 SXM5" in table


def test_model_csv_and_memory(runner):
    rows = list(csv.DictReader(io.StringIO(run(runner, "model", "unet2d", "--format", "csv").output)))
    assert rows[0]["layer"] == "enc1_conv1" and rows[0]["output_shape"] == "32x128x128"
    items = json.loads(run(runner, "model", "unet3d", "--input-size", 32, "--memory", "--format", "json").output)
    assert [i["item"] for i in items][-1] == "peak_bytes"


def test_model_plot_writes_a_png(runner, tmp_path):
    png = tmp_path / "roof.png"
    run(runner, "model", "alexnet", "-b", 128, "--device", "h100", "--plot", png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def test_networks_and_devices(runner):
    nets = json.loads(run(runner, "networks", "--format", "json").output)
    assert [n["network"] for n in nets] == ["alexnet", "unet2d", "unet3d"]
    alexnet = json.loads(run(runner, "networks", "alexnet", "--format", "json").output)
    assert alexnet["grouped_convolutions"] is False and any("ungrouped" in n for n in alexnet["notes"])
    assert len(alexnet["layers"]) == 21
    assert "enc1_conv1_dw" in run(runner, "networks", "unet2d", "--conv-type", "separable").output
    devices = json.loads(run(runner, "devices", "--format", "json").output)
    assert len(devices) == 15 and all(d["sources"] for d in devices)
    assert "paper 003" in run(runner, "devices", "gtx1080").output


def test_profile_runs_show_sql(runner, tmp_path):
    db = tmp_path / "trace.db"
    out = run(runner, "profile", "alexnet", "--batch", 128, "--db", db).output
    assert "backend: model" in out and "nothing was measured" in out and "tracker show 1" in out
    runs = json.loads(run(runner, "runs", "--db", db, "--format", "json").output)
    assert runs[0]["status"] == "complete" and runs[0]["batch"] == 128 and runs[0]["backend"] == "model"
    shown = json.loads(run(runner, "show", 1, "--db", db, "--format", "json").output)
    assert shown["run"]["network"] == "alexnet" and len(shown["layers"]) == 49 and shown["launches"] == []
    assert "analytic predictions" in run(runner, "show", "--db", db).output
    got = run(
        runner,
        "sql",
        "SELECT layer, macs, ops FROM layer_phase WHERE phase = 'fwd' AND layer = 'conv2'",
        "--db",
        db,
        "--format",
        "csv",
    ).output
    # the default plan's Winograd F(4x4,5x5): 8x8 products for each of 128 x 7 x 7 tiles and 96 x 256 channel pairs
    winograd = next(
        p for p in predict(build("alexnet"), 128, algorithm="winograd_f4") if (p.layer, p.phase) == ("conv2", "fwd")
    )
    assert got.splitlines() == ["layer,macs,ops", f"conv2,{128 * 49 * 64 * 96 * 256},{winograd.ops}"]


def test_the_first_command_without_a_gpu_predicts_for_a_catalog_gpu_and_reports_in_full(runner, tmp_path):
    """The README's first command on a machine with no GPU: the model predicts for the H100 and says
    so, and the report draws time per layer, the roofline and memory from that run."""
    db = tmp_path / "trace.db"
    out = run(runner, "profile", "alexnet", "--batch", 128, "--db", db).output
    assert "device: H100 SXM5 80GB, from the catalog (--device NAME predicts for another" in out
    assert "times for the H100 SXM5 80GB" in out
    run(runner, "report", 1, "--db", db, "--out", tmp_path / "report")
    assert {"runtime", "roofline", "efficiency", "memory"} <= {p.stem for p in (tmp_path / "report").glob("*.svg")}
    named = run(runner, "profile", "alexnet", "--batch", 2, "--device", "a100", "--db", db).output
    assert "from the catalog" not in named and "times for the A100" in named


def test_profile_json_reports_the_backend_and_why(runner, tmp_path):
    result = run(runner, "profile", "alexnet", "--db", tmp_path / "t.db", "--format", "json", "--device", "a100")
    summary = json.loads(result.stdout)[0]
    assert summary["backend"] == "model" and summary["reason"] and summary["measured"] is False
    assert summary["predicted_ms"] > 0


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""


def assert_one_line_error(result, *words):
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


@pytest.fixture
def tracker_db(runner, tmp_path) -> Path:
    db = tmp_path / "trace.db"
    run(runner, "profile", "alexnet", "--batch", 2, "--db", db)
    return db


@pytest.mark.parametrize(
    "args, words",
    [
        (["model", "alexnett"], ["unknown network", "did you mean alexnet"]),
        (["model", "alexnet", "--device", "h1000"], ["unknown device"]),
        (["model", "alexnet", "--batch", 0], ["--batch"]),
        (["model", "alexnet", "--batch", 10**9], ["--batch"]),
        (["model", "alexnet", "--dtype-bits", 12], ["--dtype-bits"]),
        (["model", "unet2d", "--conv-type", "fancy"], ["--conv-type"]),
        (["model", "alexnet", "--depth", 3], ["alexnet does not take --depth"]),
        (["model", "unet2d", "--input-size", 100], ["not divisible"]),
        (["model", "alexnet", "--plot", "x.png"], ["--plot needs --device"]),
        (["devices", "titan x"], ["ambiguous"]),
        (["profile", "alexnet", "--backend", "events"], ["needs an NVIDIA GPU"]),
        (["profile", "alexnet", "--backend", "ncu"], ["needs an NVIDIA GPU"]),
        (["profile", "alexnet", "--variant", "turbo"], ["unknown variant"]),
        (["profile", "alexnet", "--variant", "conv=warp"], ["unknown conv variant 'warp'"]),
        (
            ["profile", "alexnet", "--repeat", 2, "--counter-iterations", 3],
            ["--counter-iterations 3 exceeds --repeat 2"],
        ),
        (["profile", "alexnet", "--counter-iterations", 0], ["--counter-iterations"]),
        (["sql", "SELEC 1"], ["SQL error"]),
        (["sql", "DELETE FROM run"], ["read-only"]),
        (["show", 99], ["no run 99"]),
        (["show", "abc"], ["not a run id"]),
        (["nosuchcommand"], ["No such command"]),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(runner, tracker_db, args, words):
    before = digest(tracker_db)
    result = runner.invoke(
        cli, [str(a) for a in args] + (["--db", str(tracker_db)] if args[0] in ("profile", "sql", "show") else [])
    )
    assert_one_line_error(result, *words)
    assert digest(tracker_db) == before


def test_profile_with_an_unavailable_backend_creates_no_database(runner, tmp_path):
    result = runner.invoke(cli, ["profile", "alexnet", "--backend", "events", "--db", str(tmp_path / "t.db")])
    assert_one_line_error(result, "--backend model")
    assert not (tmp_path / "t.db").exists()


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda p: p.write_text("hello, not a database\n" * 100), ["cannot open"]),
        (lambda p: sqlite3.connect(p).execute("CREATE TABLE mine (x)").connection.close(), ["not a tracker"]),
    ],
)
@pytest.mark.parametrize("command", [["profile", "alexnet"], ["runs"], ["sql", "SELECT 1"]])
def test_foreign_files_are_refused_untouched(runner, tmp_path, make, words, command):
    path = tmp_path / "other.db"
    make(path)
    before = digest(path)
    assert_one_line_error(runner.invoke(cli, command + ["--db", str(path)]), *words)
    assert digest(path) == before


def test_newer_schema_is_refused(runner, tracker_db):
    with sqlite3.connect(tracker_db) as conn:
        conn.execute("UPDATE schema_info SET version = 99")
    before = digest(tracker_db)
    for command in (["runs"], ["profile", "alexnet"]):
        assert_one_line_error(runner.invoke(cli, command + ["--db", str(tracker_db)]), "newer", "upgrade tracker")
    assert digest(tracker_db) == before


@pytest.mark.parametrize(
    "target, words",
    [
        ("{tmp}/no/such/dir/trace.db", ["does not exist"]),
        ("postgresql://u@h:notaport/db", ["malformed database URL"]),
        ("{tmp}/none.db", ["no trace database"]),
    ],
)
def test_bad_database_paths(runner, tmp_path, target, words):
    command = ["runs"] if "none.db" in target else ["profile", "alexnet"]
    result = runner.invoke(cli, command + ["--db", target.format(tmp=tmp_path)])
    assert_one_line_error(result, *words)
    assert list(tmp_path.iterdir()) == []


def test_tracker_db_environment_variable(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACKER_DB", str(tmp_path / "env.db"))
    run(runner, "profile", "alexnet", "-b", 1)
    assert (tmp_path / "env.db").exists()
    assert json.loads(run(runner, "runs", "--format", "json").output)[0]["batch"] == 1


def test_installed_tracker_command(tmp_path):
    exe = Path(sys.executable).with_name("tracker")  # the entry point of the environment running the tests
    assert exe.exists(), "the tracker entry point is not installed (pip install -e .)"
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("tracker, version")
    out = subprocess.run(
        [exe, "profile", "alexnet", "--batch", "128", "--db", str(tmp_path / "t.db")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "backend: model" in out
    bad = subprocess.run([exe, "model", "nonet"], capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


HEAVY = ("sqlalchemy", "pandas", "matplotlib", "seaborn", "cupy", "numpy")


@pytest.mark.parametrize("args", [["--help"], ["model", "alexnet", "--batch", "1"], ["networks"], ["devices"]])
def test_fast_paths_import_nothing_heavy(args):
    """The CLI's cold start stays fast because these paths never import a heavy library."""
    code = (
        f"import sys\nfrom tracker.cli import cli\ntry:\n    cli.main({args!r})\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize(
    "args", [["runs"], ["show", "1"], ["experiments"], ["experiments", "e1"], ["sql", "SELECT id FROM run"]]
)
def test_read_commands_import_nothing_heavy(args, tmp_path):
    """`runs`, `show`, `sql` and `experiments` read a SQLite store through sqlite3 alone: SQLAlchemy's
    import takes longer than the 0.3 s a read command may (they took 0.5-0.7 s; `experiments` 0.9-2.1 s
    when it imported pandas through tracker.analysis)."""
    db = str(tmp_path / "t.db")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracker",
            "experiment",
            "batch",
            "alexnet",
            "--batches",
            "1,2",
            "--backend",
            "model",
            "--device",
            "h100",
            "--db",
            db,
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    code = (
        f"import sys\nfrom tracker.cli import cli\ntry:\n    cli.main({[*args, '--db', db]!r})\n"
        "except SystemExit as e:\n"
        f"    assert not e.code, e.code\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_profile_records_its_settings(runner, tmp_path):
    db = tmp_path / "t.db"
    run(
        runner,
        "profile",
        "unet2d",
        "-b",
        2,
        "--conv-type",
        "separable",
        "--phases",
        "fwd",
        "--variant",
        "conv=fused,lrn=shared",
        "--l1-bypass",
        "--dtype-bits",
        16,
        "--db",
        db,
    )
    info = json.loads(run(runner, "show", "--db", db, "--format", "json").output)
    assert info["run"]["network_options"]["conv_type"] == "separable"
    assert info["run"]["variants"] == {"conv": "fused", "lrn": "shared"} and info["run"]["l1_bypass"] is True
    assert info["run"]["dtype_bits"] == 16 and info["run"]["phases"] == "fwd"
    assert {row["phase"] for row in info["layers"]} == {"fwd"}
    assert info["layers"][0]["layer"] == "enc1_conv1_dw"


def test_metrics_lists_the_catalog(runner):
    from tracker.metrics import CATALOG

    result = runner.invoke(cli, ["metrics", "--format", "json"])
    rows = json.loads(result.output)
    assert result.exit_code == 0 and len(rows) == len(CATALOG)
    stalls = json.loads(runner.invoke(cli, ["metrics", "--family", "stall", "--format", "json"]).output)
    long_scoreboard = next(r for r in stalls if r["name"] == "stall_long_scoreboard")
    assert long_scoreboard["nvprof"] == "stall_memory_dependency" and long_scoreboard["category"] == "memory_dependency"
    one = runner.invoke(cli, ["metrics", "l2_hit_rate", "--format", "csv"])
    assert "lts__t_sector_hit_rate.pct" in one.output and "l2_tex_hit_rate" in one.output
    # one metric for people: key: value lines wrapped at 100 characters, not a 500-character row
    table = runner.invoke(cli, ["metrics", "l2_hit_rate"]).output.splitlines()
    assert max(map(len, table)) <= 100 and "        ncu: lts__t_sector_hit_rate.pct" in table
    assert "     nvprof: l2_tex_hit_rate" in table and "     rollup: weighted:l2_sectors" in table


def test_devices_headers_name_what_the_cells_hold(runner):
    """dram_gbps held GB/s and l2_kib showed '2.00 MiB': the cells carry their unit, the headers
    the quantity."""
    lines = run(runner, "devices").output.splitlines()
    assert "fp32 (FLOP/s)  dram (B/s)  l2 (bytes)" in lines[0]
    gtx1080 = next(line for line in lines if line.startswith("gtx1080 "))
    assert gtx1080.split()[-10:] == ["8.87", "TFLOP/s", "320", "GB/s", "2.00", "MiB", "96.0", "KiB", "27.7", "FLOP/B"]
    assert "           dram (B/s): 320 GB/s" in run(runner, "devices", "gtx1080").output


def test_unknown_metric_is_one_line(runner):
    result = runner.invoke(cli, ["metrics", "l2_hitrate"])
    assert result.exit_code == 1 and "did you mean l2_hit_rate" in result.output


def test_counter_iterations_on_a_backend_without_counters_are_recorded_as_none(runner, tmp_path):
    db = tmp_path / "t.db"
    result = run(runner, "profile", "alexnet", "--counter-iterations", 2, "--db", db)
    assert "  --counter-iterations ignored: the model backend runs no counter profiler\n" in result.output
    summary = json.loads(run(runner, "profile", "alexnet", "--db", db, "--format", "json").stdout)[0]
    assert summary["counter_iterations"] is None
    assert json.loads(run(runner, "show", "--db", db, "--format", "json").output)["run"]["counter_iterations"] is None


def test_ncu_backend_without_a_gpu_is_one_line(runner, tmp_path):
    db = tmp_path / "t.db"
    result = runner.invoke(cli, ["profile", "alexnet", "--backend", "ncu", "--db", str(db)])
    assert result.exit_code == 1 and "needs an NVIDIA GPU" in result.output
    assert result.output.rstrip().endswith("; use --backend model (no GPU needed)")  # events needs a GPU too
    assert not db.exists()


def test_the_public_surface_loads_on_first_use():
    """`import tracker` imports nothing heavy; each public name loads its module when first read."""
    import subprocess
    import sys

    code = (
        "import sys, tracker; assert not any(m in sys.modules for m in ('pandas', 'numpy', 'sqlalchemy')); "
        "from tracker.analysis import runtime; "
        "assert tracker.open_store.__module__ == 'tracker.store.db' and tracker.view.__module__ == 'tracker.analysis' "
        "and tracker.analysis.runtime is runtime and callable(tracker.profile.profile); "
        "assert sorted(tracker.__all__) == sorted(dir(tracker))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_batch_experiment_says_what_its_first_table_holds(runner, tmp_path):
    """Its first table is each batch's training step, in all and per image (it once promised a
    speedup it did not print, then printed every layer row and no total); the layer rows
    follow with --layers. On the model it predicts for the catalog's default GPU, saying so in
    the line tracker profile prints."""
    db = tmp_path / "t.db"
    out = run(runner, "experiment", "batch", "alexnet", "--batches", "1,2", "--backend", "model", "--db", db).output
    lines = out.splitlines()
    default = (
        "device: H100 SXM5 80GB, from the catalog (--device NAME predicts for another; `tracker devices` lists them)"
    )
    assert default in lines
    first = lines.index(next(line for line in lines if line.startswith("experiment e1 complete")))
    assert "the training step at each batch, in all and per image" in lines[first] and "speedup" not in out
    assert lines[first + 1].split() == ["batch", "step", "(time)", "per", "image", "(time)", "images/s", "ops", "bytes"]
    assert [line.split()[0] for line in lines[first + 3 : first + 5]] == ["1", "2"]
    assert lines[first + 6 :] == ["98 layer phase rows: --layers prints them"]
    layers = json.loads(
        run(
            runner,
            "experiment",
            "batch",
            "alexnet",
            "--batches",
            "1,2",
            "--backend",
            "model",
            "--db",
            db,
            "--fresh",
            "--format",
            "json",
        ).stdout
    )
    import pandas as pd

    from tracker.analysis.experiments import batch_totals

    totals = batch_totals(pd.DataFrame(layers))
    assert list(totals["batch"]) == [1, 2] and len(layers) == 98  # 49 layer phases a batch
    for batch, step_ms, ops in totals[["batch", "step_ms", "ops"]].itertuples(index=False):
        assert step_ms == pytest.approx(sum(r["ms"] for r in layers if r["batch"] == batch))
        assert ops == sum(r["ops"] for r in layers if r["batch"] == batch) > 0
    profiled = run(runner, "profile", "alexnet", "--batch", "1", "--backend", "model", "--db", db).output
    assert default in profiled.splitlines()
    assert (
        "per layer phase"
        in run(
            runner, "experiment", "batch", "alexnet", "--batches", "1,2", "--backend", "model", "--db", db, "--layers"
        ).output
    )
