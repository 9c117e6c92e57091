"""`tracker upgrade` of a database an older schema wrote, on SQLite and PostgreSQL. v9's
run.counter_iterations: pass 2 profiled every measured iteration before it, so a run with counters
gets its repeat count and a run without counters NULL. v10: the views list their rows in phase
order (fwd, bwd_data, bwd_weight), as every table and `tracker show` do. v11: pass 2's collector
in columns of its own, not ncu's."""

from __future__ import annotations

from samples import sample_store
from sqlalchemy import create_engine, text

from tracker.cli import cli
from tracker.model import lookup
from tracker.nets import build
from tracker.profile import profile
from tracker.store import SCHEMA_VERSION, open_store, run_sql


def as_v8(db: str) -> None:
    """The store as schema v8 wrote it: no run.counter_iterations (nor the view that reads it)."""
    url = db if "://" in db else f"sqlite:///{db}"
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP VIEW run_summary"))
        conn.execute(text("ALTER TABLE run DROP COLUMN counter_iterations"))
        conn.execute(text("UPDATE schema_info SET version = 8"))
    engine.dispose()


def test_an_upgrade_from_v8_counts_every_iteration_of_a_run_with_counters(runner, db):
    sample_store(db)  # run 1: nvprof counters on all 3 iterations of the K20c sample
    profile(db, build("alexnet"), 16, backend="model", device=lookup("h100"))  # run 2: no counters
    as_v8(db)
    upgraded = runner.invoke(cli, ["upgrade", "--db", db])
    assert upgraded.exit_code == 0 and f"trace schema v8 -> v{SCHEMA_VERSION}, every run kept" in upgraded.output, (
        upgraded.output
    )
    store = open_store(db, write=False)
    assert run_sql(store, "SELECT id, repeat, counter_iterations FROM run ORDER BY id")[1] == [(1, 3, 3), (2, 0, None)]
    assert run_sql(store, "SELECT run_id, counter_iterations FROM run_summary ORDER BY run_id")[1] == [
        (1, 3),
        (2, None),
    ]


def test_an_upgrade_from_v9_lists_every_views_rows_in_phase_order(runner, db):
    profile(db, build("alexnet"), 2, backend="model", device=lookup("h100"))
    url = db if "://" in db else f"sqlite:///{db}"
    engine = create_engine(url)
    with engine.begin() as conn:  # v9's view: no ORDER BY (the primary key's order, bwd_weight first)
        conn.execute(text("DROP VIEW layer_phase"))
        conn.execute(
            text(
                "CREATE VIEW layer_phase AS SELECT l.run_id, l.layer_id, p.phase FROM layer l "
                "JOIN prediction p ON p.run_id = l.run_id AND p.layer_id = l.layer_id"
            )
        )
        conn.execute(text("UPDATE schema_info SET version = 9"))
    engine.dispose()
    upgraded = runner.invoke(cli, ["upgrade", "--db", db])
    assert upgraded.exit_code == 0 and f"v9 -> v{SCHEMA_VERSION}" in upgraded.output, upgraded.output
    store = open_store(db, write=False)
    _, rows = run_sql(store, "SELECT layer_id, phase FROM layer_phase WHERE layer_id = 1")  # conv1: no bwd_data
    assert rows == [(1, "fwd"), (1, "bwd_weight")]
    _, rows = run_sql(store, "SELECT layer_id, phase FROM layer_phase WHERE layer_id = 2")
    assert rows == [(2, "fwd"), (2, "bwd_data")]
    _, rows = run_sql(store, "SELECT layer_id, phase FROM layer_phase WHERE layer_id = 5")
    assert rows == [(5, "fwd"), (5, "bwd_data"), (5, "bwd_weight")]


def test_an_upgrade_to_v11_moves_ncus_columns_to_the_collectors_own(tmp_path):
    """v11: run.ncu_* become collector_version and collector_settings, and metric_def's ncu and nvprof
    names become each run's metric_source rows: on the batch-16 H100 run as schema v3 recorded it."""
    import sqlite3
    from contextlib import closing

    from recorded import B16, DATA, recording

    from tracker.profilers.ncu import SOURCES

    path = recording(B16 + ".gz", tmp_path, DATA / "schema-v3")
    with closing(sqlite3.connect(path)) as conn:
        before = conn.execute(
            "SELECT ncu_version, ncu_replay_mode, ncu_cache_control, ncu_clock_control FROM run"
        ).fetchone()
    assert before == ("2025.3.1.0", "kernel", "all", "base")
    open_store(path, write=True).dispose()
    store = open_store(path, write=False)
    ((version, settings),) = run_sql(store, "SELECT collector_version, collector_settings FROM run")[1]
    assert (version, settings) == (
        "2025.3.1.0",
        {"replay_mode": "kernel", "cache_control": "all", "clock_control": "base"},
    )
    sources = dict(run_sql(store, "SELECT name, source FROM metric_source WHERE run_id = 1")[1])
    stored = {name for (name,) in run_sql(store, "SELECT DISTINCT name FROM metric")[1]}
    assert sources == SOURCES.names(stored) and len(sources) == 81  # ncu's name of every metric it stored
    with closing(sqlite3.connect(path)) as conn:
        columns = {
            table: {row[1] for row in conn.execute(f"PRAGMA table_info({table})")} for table in ("run", "metric_def")
        }
    assert not {c for c in columns["run"] if c.startswith("ncu_")} and not {"ncu", "nvprof"} & columns["metric_def"]


def test_an_upgrade_brings_metric_def_to_the_catalog(runner, db):
    """A counter the catalog gained after the store was written gets its metric_def row (the counter
    views pivot the catalog), and one it redefined its new unit; a version bump is all it takes."""
    from tracker.metrics import CATALOG

    profile(db, build("alexnet"), 2, backend="model", device=lookup("h100"))
    added, redefined = CATALOG[0], CATALOG[1]
    url = db if "://" in db else f"sqlite:///{db}"
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM metric_def WHERE name = :name"), {"name": added.name})
        conn.execute(text("UPDATE metric_def SET unit = 'furlongs' WHERE name = :name"), {"name": redefined.name})
        conn.execute(text(f"UPDATE schema_info SET version = {SCHEMA_VERSION - 1}"))
    engine.dispose()
    upgraded = runner.invoke(cli, ["upgrade", "--db", db])
    assert upgraded.exit_code == 0, upgraded.output
    _, rows = run_sql(open_store(db, write=False), "SELECT name, unit FROM metric_def")
    assert sorted(rows) == sorted((m.name, m.unit) for m in CATALOG)
