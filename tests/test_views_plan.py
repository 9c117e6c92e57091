"""Every view answers a one-run query by key, on SQLite and PostgreSQL: ``SELECT * FROM view WHERE
run_id = ?`` reaches the tables the view reads through their indexes (SEARCH, an index condition),
never by scanning every run's rows. A view that read another, sorted view inside an aggregate
scanned all of rollup_metric, and took 200-700 ms for one run of a 50-run store."""

from __future__ import annotations

import json
import re

import pytest
from samples import sample_store
from sqlalchemy import text

from tracker.store import open_store
from tracker.store.views import VIEWS

ONE_RUN = "SELECT * FROM {} WHERE run_id = 1"


def sqlite_full_scans(conn, sql: str) -> list[str]:
    """The plan lines of ``sql`` that scan a stored table from end to end (SCAN of a table, not of a
    subquery the plan built)."""
    plan = [row[3] for row in conn.execute(text(f"EXPLAIN QUERY PLAN {sql}"))]
    built = {m.group(1) for line in plan if (m := re.match(r"(?:MATERIALIZE|CO-ROUTINE) (\S+)", line))}
    scans = [line for line in plan if (m := re.match(r"SCAN (?:TABLE )?(\S+)", line)) and m.group(1) not in built]
    assert any(line.startswith("SEARCH") for line in plan) or scans, plan  # a plan this parser reads
    return scans


def _nodes(node: dict):
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


def postgres_full_scans(conn, sql: str) -> list[str]:
    """The scans in the plan of ``sql`` that read a table without an index condition on its run (a
    Seq Scan, or an index read end to end), with sequential scans off: the filter must reach every
    table, whatever the table sizes would make the planner prefer."""
    conn.execute(text("SET LOCAL enable_seqscan = off"))
    plan = conn.execute(text(f"EXPLAIN (FORMAT JSON) {sql}")).scalar_one()
    plan = json.loads(plan) if isinstance(plan, str) else plan
    scans = []
    for node in _nodes(plan[0]["Plan"]):
        if "Relation Name" not in node:
            continue
        condition = node.get("Index Cond") or node.get("Recheck Cond") or ""
        if node["Node Type"] == "Seq Scan" or not re.search(r"\b(run_)?id = ", condition):
            scans.append(f"{node['Node Type']} on {node['Relation Name']} {condition}".strip())
    return scans


def full_scans(conn, sql: str) -> list[str]:
    return (postgres_full_scans if conn.dialect.name == "postgresql" else sqlite_full_scans)(conn, sql)


@pytest.fixture
def store(db):
    sample_store(db)  # run 1: counters on 4 layers, 3 iterations
    sample_store(db)  # run 2: another run's rows for the filter to leave out
    store = open_store(db, write=False)
    yield store
    store.dispose()


def test_a_one_run_query_reads_every_views_tables_by_key(store):
    with store.connect() as conn, conn.begin():
        scans = {view.name: found for view in VIEWS if (found := full_scans(conn, ONE_RUN.format(view.name)))}
    assert scans == {}


def test_the_plan_check_sees_a_filter_that_cannot_reach_the_table(store):
    """A window over every run (partitioned by name) keeps the run filter above it: a full scan."""
    over_all_runs = (
        "(SELECT run_id, name, ROW_NUMBER() OVER (PARTITION BY name ORDER BY value) AS place FROM rollup_metric) ranked"
    )
    with store.connect() as conn, conn.begin():
        assert full_scans(conn, ONE_RUN.format(over_all_runs))


@pytest.mark.parametrize("view", VIEWS, ids=lambda view: view.name)
def test_no_view_reads_another_view(view):
    """Every view is sorted, and a sorted view inside another's aggregate keeps the run filter out."""
    names = {v.name for v in VIEWS}
    read = set(re.findall(r"\b(?:FROM|JOIN)\s+(\w+)", view.select, re.IGNORECASE))
    assert not read & names, f"{view.name} reads the view {read & names}"


def test_an_upgrade_from_v12_makes_the_views_read_tables(runner, tmp_path):
    """v12's counter views read the sorted layer_metric view: `tracker upgrade` makes them anew."""
    from tracker.cli import cli
    from tracker.store import SCHEMA_VERSION

    db = str(tmp_path / "trace.db")
    sample_store(db)
    store = open_store(db, write=True)
    with store.begin() as conn:
        conn.execute(text("DROP VIEW cache_hit_rate"))
        v12 = next(view for view in VIEWS if view.name == "cache_hit_rate").create()
        conn.execute(text(v12.replace("FROM rollup_metric s", "FROM layer_metric s")))
        conn.execute(text("UPDATE schema_info SET version = 12"))
        assert full_scans(conn, ONE_RUN.format("cache_hit_rate"))
    store.dispose()
    upgraded = runner.invoke(cli, ["upgrade", "--db", db])
    assert upgraded.exit_code == 0 and f"v12 -> v{SCHEMA_VERSION}, every run kept" in upgraded.output, upgraded.output
    store = open_store(db, write=False)
    with store.connect() as conn:
        assert full_scans(conn, ONE_RUN.format("cache_hit_rate")) == []
    store.dispose()
