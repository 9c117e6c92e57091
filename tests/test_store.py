"""The trace store on SQLite and PostgreSQL: round trips, the SQL contract, refusals that change
nothing, interrupted and failed runs, and concurrent writers."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from tracker.errors import StoreError
from tracker.gpu.network import algorithms
from tracker.model import predict
from tracker.nets import build
from tracker.profile import profile
from tracker.store import (
    SCHEMA_VERSION,
    RunWriter,
    find_run,
    launch_rows,
    layer_rows,
    list_runs,
    metric_rows,
    open_store,
    recording,
    run_dict,
    run_sql,
)
from tracker.store.contract import ROOT, schema_sql, views_sql
from tracker.store.schema import Launch


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def model_run(db: str, batch: int = 4) -> int:
    return profile(db, build("alexnet"), batch, backend="model").run_id


def test_profile_round_trip(db):
    run_id = model_run(db, batch=128)
    store = open_store(db, write=False)
    (row,) = list_runs(store)
    assert row["run_id"] == run_id and row["status"] == "complete" and row["layers"] == 21
    info = run_dict(find_run(store, "last"))
    assert info["backend"] == "model" and info["batch"] == 128 and info["network"] == "alexnet"
    assert info["backend_reason"] and info["finished_at"]
    net = build("alexnet")
    expected = predict(net, 128, algorithm=algorithms(net, info["plan"], 128))  # the plan it recorded
    assert row["ops"] == sum(p.ops for p in expected)
    rows = layer_rows(store, run_id)
    assert [(r["layer"], r["phase"], r["ops"], r["bytes"]) for r in rows] == [
        (p.layer, p.phase, p.ops, p.bytes) for p in expected
    ]
    assert rows[0]["output_shape"] == [96, 55, 55]
    assert rows[0]["measured_ms"] is None  # a model run measures nothing


def test_launches_and_metrics_round_trip_through_the_views(db):
    run_id = model_run(db)
    store = open_store(db, write=True)
    launches = [
        dict(
            invocation=invocation,
            layer_id=5,
            phase="fwd",
            repeat=repeat,
            kernel_name="conv2d_fwd_shared",
            variant="shared",
            l1_policy="ca",
            grid_x=8,
            grid_y=1,
            grid_z=1,
            block_x=256,
            block_y=1,
            block_z=1,
            shared_bytes=4096,
            registers=40,
            time_ms=ms,
        )
        for invocation, (repeat, ms) in enumerate([(0, 1.0), (0, 0.5), (1, 3.0), (1, 0.5)])
    ]
    RunWriter(store, run_id).add_launches(launches, [dict(invocation=0, name="duration_ns", value=1e6)])
    reader = open_store(db, write=False)
    conv2 = next(r for r in layer_rows(reader, run_id) if r["layer"] == "conv2" and r["phase"] == "fwd")
    assert conv2["launches"] == 2  # per repeat
    assert conv2["measured_ms"] == pytest.approx(2.5)  # the median of 1.5 and 3.5 (rollup_time)
    assert conv2["median_ms"] == pytest.approx(2.5)  # median of 1.5 and 3.5
    assert conv2["spread_pct"] == pytest.approx(80.0)  # (3.5 - 1.5) / 2.5
    assert conv2["achieved_gflops"] == pytest.approx(conv2["ops"] / 2.5e6)
    assert len(launch_rows(reader, run_id)) == 4
    assert metric_rows(reader, run_id) == [{"invocation": 0, "name": "duration_ns", "value": 1e6}]


def test_schema_files_are_rendered_from_the_orm():
    assert (ROOT / "schema.sql").read_text() == schema_sql(), "run: python -m tracker.store.contract"
    assert (ROOT / "views.sql").read_text() == views_sql(), "run: python -m tracker.store.contract"


def _catalog(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name != 'schema_info'"
            " AND name NOT LIKE 'sqlite_autoindex%' ORDER BY type, name"
        ).fetchall()
        columns = {name: conn.execute(f"PRAGMA table_xinfo({name})").fetchall() for _, name, _, _ in rows}
    normal = [(t, n, tb, re.sub(r"\s+", " ", s or "").strip()) for t, n, tb, s in rows]
    return normal + sorted(columns.items())


def test_schema_sql_creates_what_the_orm_creates(tmp_path):
    model_run(str(tmp_path / "orm.db"))
    contract = tmp_path / "contract.db"
    with sqlite3.connect(contract) as conn:
        conn.executescript((ROOT / "schema.sql").read_text() + (ROOT / "views.sql").read_text())
    assert _catalog(contract) == _catalog(tmp_path / "orm.db")


def test_views_run_on_both_backends(db):
    model_run(db)
    store = open_store(db, write=False)
    for view in ("layer_phase", "layer_time", "run_summary"):
        run_sql(store, f"SELECT * FROM {view}")


def test_foreign_keys_are_enforced(db):
    store = open_store(db, write=True)
    with pytest.raises(IntegrityError):
        with store.session() as s:
            s.add(
                Launch(
                    run_id=999,
                    invocation=0,
                    layer_id=1,
                    phase="fwd",
                    repeat=0,
                    kernel_name="k",
                    variant="global",
                    l1_policy="ca",
                    grid_x=1,
                    grid_y=1,
                    grid_z=1,
                    block_x=1,
                    block_y=1,
                    block_z=1,
                    shared_bytes=0,
                )
            )


def test_sqlite_runs_in_wal_mode(tmp_path):
    path = tmp_path / "trace.db"
    model_run(str(path))
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize(
    "made, why",
    [
        ("CREATE TABLE notes (body TEXT)", "it has tables but no schema_info"),
        ("DELETE FROM schema_info", "its schema_info table is empty"),
    ],
)
def test_a_foreign_sqlite_database_is_refused_untouched(tmp_path, made, why):
    path = tmp_path / "other.db"
    if made.startswith("DELETE"):
        model_run(str(path))
    conn = sqlite3.connect(path)
    conn.execute(made)
    conn.commit()
    conn.close()  # the last connection: SQLite removes the -wal and -shm files
    before = digest(path)
    for write in (True, False):
        with pytest.raises(StoreError, match=rf"not a tracker trace database \({why}\)"):
            open_store(str(path), write=write)
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


def test_a_file_that_is_not_a_database_is_refused_untouched(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a database, just some text that is long enough to have a header\n" * 20)
    before = digest(path)
    for write in (True, False):
        with pytest.raises(StoreError, match="cannot open"):
            open_store(str(path), write=write)
    assert digest(path) == before


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "trace.db"
    model_run(str(path))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE schema_info SET version = version + 1")
    before = digest(path)
    with pytest.raises(StoreError, match="newer than this tracker"):
        open_store(str(path), write=True)
    assert digest(path) == before


@pytest.mark.parametrize(
    "target, message",
    [
        ("{tmp}/missing/dir/trace.db", "does not exist"),
        ("{tmp}", "is a directory"),
        ("postgresql://user@:::1:bad/db", "malformed database URL|cannot"),
        ("nosuchdialect://localhost/db", "cannot use database URL"),
    ],
)
def test_bad_database_targets(tmp_path, target, message):
    with pytest.raises(StoreError, match=message):
        open_store(target.format(tmp=tmp_path), write=True)
    assert not (tmp_path / "missing").exists()


def test_reading_a_missing_database_creates_nothing(tmp_path):
    with pytest.raises(StoreError, match="no trace database"):
        open_store(str(tmp_path / "none.db"), write=False)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_run_is_marked_and_leaves_no_half_written_rows(db):
    earlier = model_run(db)
    store = open_store(db, write=True)
    net = build("alexnet")
    rows = predict(net, 1)
    with pytest.raises(IntegrityError):
        with recording(
            store,
            network="alexnet",
            network_options={},
            batch=1,
            phases="both",
            dtype_bits=32,
            variants={},
            l1_bypass=False,
            backend="model",
            backend_reason="test",
            repeat=0,
        ) as run:
            run.add_layers(net, rows[:-1] + [rows[0]])  # a duplicate key fails the one transaction
    reader = open_store(db, write=False)
    runs = {r["run_id"]: r for r in list_runs(reader)}
    assert runs[run.run_id]["status"] == "failed" and runs[run.run_id]["layers"] == 0
    assert "IntegrityError" in run_dict(find_run(reader, run.run_id))["error"]
    assert runs[earlier]["status"] == "complete" and runs[earlier]["layers"] == 21


CHILD = textwrap.dedent("""
    import sys, time
    from tracker.model import predict
    from tracker.nets import build
    from tracker.store import open_store, recording
    store = open_store(sys.argv[1], write=True)
    net = build("alexnet")
    with recording(store, network="alexnet", network_options={}, batch=1, phases="both", dtype_bits=32,
                   variants={}, l1_bypass=False, backend="model", backend_reason="test", repeat=0) as run:
        run.add_layers(net, predict(net, 1))
        print(run.run_id, flush=True)
        time.sleep(60)
""")


@pytest.mark.parametrize(
    "sig, stored", [(signal.SIGTERM, "interrupted"), (signal.SIGINT, "interrupted"), (signal.SIGKILL, "running")]
)
def test_interrupted_runs_are_marked_and_earlier_runs_untouched(db, sig, stored):
    earlier = model_run(db)
    before = run_dict(find_run(open_store(db, write=False), earlier))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, db],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # as from a terminal
    run_id = int(child.stdout.readline())
    child.send_signal(sig)
    child.wait(timeout=30)
    reader = open_store(db, write=False)
    with reader.connect() as conn:
        status = conn.execute(text("SELECT status FROM run WHERE id = :id"), {"id": run_id}).scalar()
    assert status == stored
    runs = {r["run_id"]: r for r in list_runs(reader)}
    assert runs[run_id]["status"] == "interrupted"  # a dead 'running' run shows as interrupted
    assert runs[run_id]["layers"] == 21  # what was committed before the signal stays
    assert run_dict(find_run(reader, earlier)) == before


def test_four_processes_write_runs_at_once(db):
    open_store(db, write=True).dispose() if db.startswith("postgresql") else None
    env = {**os.environ, "TRACKER_DB": db}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tracker",
                "profile",
                "alexnet",
                "--batch",
                str(b),
                "--backend",
                "model",
                "--format",
                "json",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for b in (16, 32, 64, 128)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [err for _, err in results]
    runs = list_runs(open_store(db, write=False))
    assert sorted(r["batch"] for r in runs) == [16, 32, 64, 128]
    assert all(r["status"] == "complete" and r["layers"] == 21 for r in runs)


def test_a_v2_database_is_upgraded_in_place_keeping_its_runs(runner, tmp_path):
    """v2 (before experiments) is v3 less two tables and a view: made so here, then upgraded."""
    import sqlite3

    from tracker.cli import cli

    db = tmp_path / "old.db"
    assert runner.invoke(cli, ["profile", "alexnet", "--backend", "model", "--db", str(db)]).exit_code == 0
    with sqlite3.connect(db) as conn:
        conn.executescript(
            "DROP TABLE experiment_run; DROP TABLE experiment; DROP VIEW layer_time_repeat; "
            "UPDATE schema_info SET version = 2;"
        )
    before = db.read_bytes()
    refused = runner.invoke(cli, ["runs", "--db", str(db)])
    assert refused.exit_code == 1 and "tracker upgrade --db" in refused.output and db.read_bytes() == before
    assert runner.invoke(cli, ["upgrade", "--db", str(tmp_path / "typo.db")]).exit_code == 1
    assert not (tmp_path / "typo.db").exists()
    upgraded = runner.invoke(cli, ["upgrade", "--db", str(db)])
    assert upgraded.exit_code == 0 and f"trace schema v2 -> v{SCHEMA_VERSION}, every run kept" in upgraded.output
    again = runner.invoke(cli, ["upgrade", "--db", str(db)])
    assert again.exit_code == 0 and f"trace schema v{SCHEMA_VERSION}, already this tracker's" in again.output
    runs = runner.invoke(cli, ["runs", "--db", str(db), "--format", "csv"])
    assert runs.exit_code == 0 and runs.output.splitlines()[1].startswith("1,complete,alexnet")
    assert runner.invoke(cli, ["experiments", "--db", str(db)]).output.startswith("no experiments yet")


def test_the_one_definition_of_the_statistics_over_repeats():
    from tracker.store.rollups import _rolled, over_repeats

    stats = over_repeats([3.0, None, 1.0, 2.0, 10.0])
    assert (stats.median, stats.min, stats.max, stats.repeats) == (2.5, 1.0, 10.0, 4)
    assert stats.spread_pct == pytest.approx(360.0)  # (10 - 1) / 2.5
    assert over_repeats([None, None]) is None and over_repeats([0.0, 0.0]).spread_pct is None
    # a layer phase's launches in one iteration: sum, max, or weighted by another metric
    assert _rolled("sum", [1.0, None, 2.0], [None] * 3) == 3.0
    assert _rolled("max", [1.0, 5.0], [None, None]) == 5.0
    assert _rolled("weighted:l2_sectors", [50.0, 100.0], [1.0, 3.0]) == pytest.approx(87.5)
    assert _rolled("weighted:l2_sectors", [50.0, 100.0], [None, None]) == 75.0  # no weights: plain mean
    assert _rolled("weighted:l2_sectors", [50.0], [0.0]) is None  # a rate of nothing
    assert _rolled("weighted:l2_sectors", [50.0, 100.0], [0.0, 0.0]) is None


def test_reading_commands_leave_nothing_beside_the_database(runner, tmp_path):
    from tracker.cli import cli

    path = tmp_path / "trace.db"
    model_run(str(path))
    before = digest(path)
    for args in (
        ["runs"],
        ["show", "last"],
        ["sql", "SELECT COUNT(*) FROM layer_phase"],
        ["export", "1", "--out", str(tmp_path / "x")],
    ):
        assert runner.invoke(cli, [*args, "--db", str(path)]).exit_code == 0, args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.db", "x"] and digest(path) == before


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder nothing can be written into, root included (chattr +i), holding a trace database."""
    folder = tmp_path / "ro"
    folder.mkdir()
    model_run(str(folder / "trace.db"))
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
            pytest.skip("running as root where chattr +i is refused: no folder is read-only to this test")
    else:
        folder.chmod(0o555)
    yield folder
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    folder.chmod(0o755)


def test_a_database_in_a_read_only_folder_opens_for_reading(read_only_folder):
    with pytest.raises(OSError):
        (read_only_folder / "probe").touch()
    store = open_store(str(read_only_folder / "trace.db"), write=False)
    assert [row["status"] for row in list_runs(store)] == ["complete"]
    assert run_sql(store, "SELECT COUNT(*) FROM layer")[1] == [(21,)]
    assert sorted(p.name for p in read_only_folder.iterdir()) == ["trace.db"]
    with pytest.raises(StoreError, match="cannot write|permission denied|cannot open"):
        open_store(str(read_only_folder / "trace.db"), write=True)


@pytest.mark.parametrize("ref", ["99999999999999999999999", "9223372036854775808", "-1", "1.5", "١"])
def test_a_run_id_out_of_range_is_no_run_id(tmp_path, ref):
    path = str(tmp_path / "trace.db")
    model_run(path)
    with pytest.raises(StoreError, match="is not a run id"):
        find_run(open_store(path, write=False), ref)


def test_database_paths_that_cannot_exist_are_one_line_errors(tmp_path):
    for target in (str(tmp_path / ("a" * 300 + ".db")), "~nosuchuser-tracker/x.db"):
        for write in (True, False):
            with pytest.raises(StoreError, match="cannot open|cannot create") as err:
                open_store(target, write=write)
            assert "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_a_view_name_is_checked_before_it_reaches_sql(tmp_path):
    """tracker.view's name is SQL: only the store's own views and tables are read."""
    from tracker.analysis import view
    from tracker.errors import UnknownName

    path = str(tmp_path / "trace.db")
    model_run(path)
    store = open_store(path, write=False)
    assert len(view(store, "layer_phase", 1)) == 49
    for name in ("run; DROP TABLE run", "stall", "sqlite_master"):
        with pytest.raises(UnknownName, match="unknown view or table"):
            view(store, name, 1)
    assert run_sql(store, "SELECT COUNT(*) FROM run")[1] == [(1,)]


def test_the_plain_reader_decodes_each_column_as_the_orm_does(db):
    """Read commands read SQLite through sqlite3, not the ORM: a run's, an experiment's and an arm's
    every column comes back the same (JSON, booleans, datetimes, NULLs)."""
    from click.testing import CliRunner

    from tracker.cli import cli
    from tracker.store.queries import arm_rows, find_experiment
    from tracker.store.schema import Experiment, ExperimentArm, Run

    model_run(db)
    result = CliRunner().invoke(
        cli,
        ["experiment", "batch", "alexnet", "--batches", "1,2", "--backend", "model", "--device", "h100", "--db", db],
    )
    assert result.exit_code == 0, result.output
    store = open_store(db, write=False)
    experiment = find_experiment(store, "last")
    arm, run = arm_rows(store, experiment.id)[0], find_run(store, "last")
    with store.session() as session:
        for record, orm in (
            (run, session.get(Run, run.id)),
            (experiment, session.get(Experiment, experiment.id)),
            (arm, session.get(ExperimentArm, (arm.experiment_id, 0))),
        ):
            columns = {c.key: getattr(orm, c.key) for c in type(orm).__table__.columns}
            assert vars(record) == columns
    assert run.l1_bypass is False and isinstance(run.network_options, dict) and arm.baseline in (True, False)


def test_a_hostile_file_with_bad_stored_values_reads_as_text(runner, tmp_path):
    """A trace file from elsewhere is hostile input: a datetime or JSON value that does not decode is
    shown as the text it is, never a traceback."""
    from tracker.cli import cli

    path = tmp_path / "trace.db"
    model_run(str(path))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE run SET started_at = 'not a time', network_options = ?, variants = '{'", ("[" * 100_000,))
    for args in (["runs"], ["show", "last"], ["show", "last", "--format", "json"]):
        result = runner.invoke(cli, [*args, "--db", str(path)])
        assert result.exit_code == 0 and "not a time" in result.output, (args, result.output)
