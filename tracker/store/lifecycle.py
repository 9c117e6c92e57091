"""The schema's lifecycle in a database: check that it is ours and which version, create it in an
empty one, migrate an older one to this version. Opening a store (``db.py``) decides which."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from tracker import __version__
from tracker.errors import StoreError

if TYPE_CHECKING:
    from sqlalchemy import Connection

SCHEMA_VERSION = 17
MIGRATABLE_FROM = 2  # schema versions from which migrate reaches the current one
VERSION_QUERY = "SELECT version FROM schema_info"  # the one row of a database of ours
_PG_SCHEMA_LOCK = 72531  # advisory lock id: one process creates the schema at a time


def check(conn: Connection, where: str) -> str:
    """``state`` of the database ``conn`` reaches."""
    from sqlalchemy import inspect, text

    return state(set(inspect(conn).get_table_names()), lambda: conn.execute(text(VERSION_QUERY)).scalar(), where)


def state(tables: set[str], version_of: Callable[[], int | None], where: str) -> str:
    """'empty', 'current' or 'older' (migratable) for a database holding ``tables``, whose schema
    version ``version_of`` reads; anything else, not ours or newer, is refused in one line."""
    if not tables:
        return "empty"
    if "schema_info" not in tables:
        raise StoreError(
            f"{where} is not a tracker trace database (it has tables but no schema_info); refusing to touch it"
        )
    version = version_of()
    if version is None:
        raise StoreError(
            f"{where} is not a tracker trace database (its schema_info table is empty); refusing to touch it"
        )
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{where} has trace schema v{version}, newer than this tracker's v{SCHEMA_VERSION}: "
            "upgrade tracker to read it"
        )
    if version < MIGRATABLE_FROM:
        raise StoreError(
            f"{where} has trace schema v{version}, older than this tracker's v{SCHEMA_VERSION}, "
            "and no migration exists from it"
        )
    return "current" if version == SCHEMA_VERSION else "older"


def version(conn: Connection) -> int:
    """The schema version a database of ours holds (``check`` first)."""
    from sqlalchemy import text

    found = conn.execute(text(VERSION_QUERY)).scalar_one()
    conn.rollback()
    return found


def create(conn: Connection, where: str) -> None:
    from sqlalchemy import insert, text

    from tracker.metrics import metric_def_rows
    from tracker.store.schema import Base, MetricDefRow, SchemaInfo
    from tracker.store.views import VIEWS

    with conn.begin():
        if conn.dialect.name == "postgresql":
            conn.execute(text(f"SELECT pg_advisory_xact_lock({_PG_SCHEMA_LOCK})"))
        if check(conn, where) == "current":  # another process created it while we waited
            return
        Base.metadata.create_all(conn)
        for view in VIEWS:
            conn.exec_driver_sql(view.create())
        conn.execute(insert(MetricDefRow), metric_def_rows())
        conn.execute(
            insert(SchemaInfo).values(version=SCHEMA_VERSION, tracker_version=__version__, created_at=datetime.now(UTC))
        )


def migrate(conn: Connection, where: str) -> None:
    """v2 -> v3 added tables (experiment, experiment_run) and a view (layer_time_repeat); v3 -> v4 the
        per-run rollups (tracker/store/rollups.py), computed here for every stored run; v4 -> v5 the
        GEMM tiles a run ran (run.tiles, NULL in older runs); v5 -> v6 the library arm (run.implementation,
    'ours' in older runs, and run.library; launch.algorithm and role; rollup_time.algorithm); v6 -> v7
    run.loaders ('async' in older runs); v7 -> v8 experiment_arm (an experiment's planned arms; older
    experiments have none); v8 -> v9 run.counter_iterations (pass 2 profiled every measured iteration
    before v9, so an older run with counters gets its repeat); v9 -> v10 views that list their rows in
    phase order (fwd, bwd_data, bwd_weight; views only); v10 -> v11 pass 2's collector in columns
    of its own (run.collector_version and collector_settings for run.ncu_*; metric_source, each run's
    names of its metrics, for metric_def's ncu and nvprof); v11 -> v12 run.tuned_variants (the variant
    `tracker tune` chose per layer phase; NULL in older runs); v12 -> v13 views that read tables, never
    another view, so that a one-run query reads that run's rows alone (views only); v13 -> v14
    launch.start_ns (when each launch began, where the run knows: NULL in older runs); v14 -> v15 the
    GPU idle between launches (rollup_idle, computed here for every stored run, and the views
    layer_idle and iteration_idle); v15 -> v16 run.provenance (the commits of tracker and its kernels
    that made a run; NULL in older runs); v16 -> v17 run.plan (the variant of each layer phase; NULL
    in older runs). Create what is
    missing, bring metric_def to the catalog and recreate every view. Any write opening migrates
    (``tracker upgrade`` is one); a read-only one refuses an older file."""
    from sqlalchemy import text, update

    from tracker.store import rollups
    from tracker.store.schema import Base, SchemaInfo
    from tracker.store.views import VIEWS

    with conn.begin():
        if conn.dialect.name == "postgresql":
            conn.execute(text(f"SELECT pg_advisory_xact_lock({_PG_SCHEMA_LOCK})"))
        if check(conn, where) == "current":
            return
        Base.metadata.create_all(conn)  # creates only the missing tables
        _add_missing_columns(conn)
        _count_profiled_iterations(conn)
        _move_to_collector_columns(conn)
        conn.exec_driver_sql("DROP INDEX IF EXISTS metric_by_name")  # v4: rollup_metric_by_name instead
        cascade = " CASCADE" if conn.dialect.name == "postgresql" else ""
        for view in reversed(VIEWS):  # views hold no data: recreate them all, as this version defines them
            conn.exec_driver_sql(f"DROP VIEW IF EXISTS {view.name}{cascade}")
        _drop_columns(conn, {"run": NCU_RUN_COLUMNS, "metric_def": ("ncu", "nvprof")})
        _sync_metric_defs(conn)
        for view in VIEWS:
            conn.exec_driver_sql(view.create())
        rollups.rebuild(conn)
        conn.execute(update(SchemaInfo).values(version=SCHEMA_VERSION))


NCU_RUN_COLUMNS = ("ncu_version", "ncu_replay_mode", "ncu_cache_control", "ncu_clock_control")  # before v11


def _move_to_collector_columns(conn: Connection) -> None:
    """v11: what run.ncu_* held into run.collector_version and collector_settings, and for each
    run's counters the name its collector gave them, from metric_def's ncu and nvprof columns (the
    catalog's names when the store was made), into metric_source."""
    from sqlalchemy import inspect, update

    from tracker.store.schema import Run

    if "ncu_version" in {c["name"] for c in inspect(conn).get_columns("run")}:
        ran = conn.exec_driver_sql(f"SELECT id, {', '.join(NCU_RUN_COLUMNS)} FROM run WHERE ncu_version IS NOT NULL")
        for run_id, version, replay, cache, clock in ran.all():
            conn.execute(
                update(Run)
                .where(Run.id == run_id)
                .values(
                    collector_version=version,
                    collector_settings=dict(replay_mode=replay, cache_control=cache, clock_control=clock),
                )
            )
    if "ncu" in {c["name"] for c in inspect(conn).get_columns("metric_def")}:
        source = "CASE WHEN r.backend = 'nvprof' THEN d.nvprof ELSE d.ncu END"
        conn.exec_driver_sql(
            f"INSERT INTO metric_source (run_id, name, source) SELECT DISTINCT m.run_id, m.name, "
            f"{source} FROM metric m JOIN run r ON r.id = m.run_id JOIN metric_def d ON d.name = m.name "
            f"WHERE {source} IS NOT NULL"
        )


def _drop_columns(conn: Connection, columns: dict[str, tuple[str, ...]]) -> None:
    """Columns a later schema no longer has, where a table still holds them (v11: ncu's)."""
    from sqlalchemy import inspect

    for table, names in columns.items():
        present = {c["name"] for c in inspect(conn).get_columns(table)}
        for name in names:
            if name in present:
                conn.exec_driver_sql(f"ALTER TABLE {table} DROP COLUMN {name}")


def _count_profiled_iterations(conn: Connection) -> None:
    """v9's run.counter_iterations for the runs before it: every measured iteration of a run that
    holds counters (pass 2 profiled them all), NULL where it holds none."""
    conn.exec_driver_sql(
        "UPDATE run SET counter_iterations = repeat WHERE counter_iterations IS NULL "
        "AND EXISTS (SELECT 1 FROM metric m WHERE m.run_id = run.id)"
    )


def _sync_metric_defs(conn: Connection) -> None:
    """metric_def as this version's catalog defines it: a metric the catalog added gets its row (the
    counter views pivot the catalog, so they read it), and one it redefined its unit, rollup and
    words. A metric the catalog dropped keeps its row: stored counters may name it."""
    from sqlalchemy import insert, select, update

    from tracker.metrics import metric_def_rows
    from tracker.store.schema import MetricDefRow

    stored = set(conn.execute(select(MetricDefRow.name)).scalars())
    rows = metric_def_rows()
    missing = [row for row in rows if row["name"] not in stored]
    if missing:
        conn.execute(insert(MetricDefRow), missing)
    for row in rows:
        if row["name"] in stored:
            conn.execute(update(MetricDefRow).where(MetricDefRow.name == row["name"]).values(**row))


def _add_missing_columns(conn: Connection) -> None:
    """Columns a later schema added to an existing table (v4: experiment's host, pid and
    process_start; v5: run's tiles; v6: the library arm's; v7: run's loaders; v9: run's
    counter_iterations; v12: run's tuned_variants; v14: launch's start_ns; v16: run's provenance;
    v17: its plan), NULL in the rows already there, or the column's server default where it has
    one (v6: run.implementation is 'ours'; v7: run.loaders 'async')."""
    from sqlalchemy import inspect

    from tracker.store.schema import Base

    for table in Base.metadata.sorted_tables:
        present = {c["name"] for c in inspect(conn).get_columns(table.name)}
        for column in table.columns:
            if column.name not in present:
                kind = column.type.compile(dialect=conn.dialect)
                default = column.server_default
                fill = f" NOT NULL DEFAULT '{default.arg}'" if default is not None else ""  # type: ignore[attr-defined]
                conn.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}{fill}")
