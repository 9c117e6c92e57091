"""Schema v9's run.counter_iterations on a database written before it: pass 2 profiled every
measured iteration then, so `tracker upgrade` gives a run with counters its repeat count and a run
without counters NULL (on SQLite and PostgreSQL)."""

from __future__ import annotations

from sqlalchemy import create_engine, text
from test_views import sample_store

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


def test_an_upgrade_to_v9_counts_every_iteration_of_a_run_with_counters(runner, db):
    assert SCHEMA_VERSION == 9
    sample_store(db)  # run 1: nvprof counters on all 3 iterations of the K20c sample
    profile(db, build("alexnet"), 16, backend="model", device=lookup("h100"))  # run 2: no counters
    as_v8(db)
    upgraded = runner.invoke(cli, ["upgrade", "--db", db])
    assert upgraded.exit_code == 0 and "trace schema v8 -> v9, every run kept" in upgraded.output, upgraded.output
    store = open_store(db, write=False)
    assert run_sql(store, "SELECT id, repeat, counter_iterations FROM run ORDER BY id")[1] == [(1, 3, 3), (2, 0, None)]
    assert run_sql(store, "SELECT run_id, counter_iterations FROM run_summary ORDER BY run_id")[1] == [(1, 3), (2, None)]
