"""`tracker sql` and `tracker.run_sql` on SQLite and PostgreSQL: user SQL is hostile input. Every
attack a probe found is here, each on both backends where it applies: writes, several statements,
functions that reach files or other sessions whatever their spelling, settings that turn writing
back on, queries that never end, Ctrl-C and a killed client, and results too big to hold."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tracker.cli import cli
from tracker.errors import StoreError
from tracker.metrics import CATALOG
from tracker.nets import build
from tracker.profile import profile
from tracker.store import open_store, query, run_sql

ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT {} FROM c"


@pytest.fixture
def store(db):
    """A read-only store holding one model run of AlexNet (21 layers)."""
    profile(db, build("alexnet"), 4, backend="model")
    return open_store(db, write=False)


def intact(store) -> bool:
    return run_sql(store, "SELECT COUNT(*) FROM run")[1] == [(1,)] and run_sql(
        store, "SELECT COUNT(*) FROM metric_def"
    )[1] == [(len(CATALOG),)]


@contextmanager
def tracker(db: str, *args: str) -> Iterator[subprocess.Popen]:
    """`tracker sql` as a user starts it from a terminal: with Ctrl-C delivered, which a process
    started from a background job would have ignored. Killed, whatever the test did."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tracker", "sql", *args, "--db", db],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        yield process
    finally:
        process.kill()
        process.communicate()


def postgres_only(store) -> None:
    if store.engine.dialect.name != "postgresql":
        pytest.skip("a PostgreSQL attack (SQLite has no such statement or function)")


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM run",
        "DROP TABLE run",
        "UPDATE run SET batch = 1",
        "CREATE TABLE t (x INTEGER)",
        "INSERT INTO metric_def (name, family, unit, description, rollup) VALUES ('x', 'f', 'u', 'd', 'sum')",
        "SELECT 1; DELETE FROM experiment_run",
        "SET TRANSACTION READ WRITE; DELETE FROM experiment_run; COMMIT",
        "BEGIN; DELETE FROM run; COMMIT",
        "WITH gone AS (DELETE FROM run RETURNING id) SELECT * FROM gone",
        "",
        "   -- only a comment",
    ],
)
def test_a_statement_that_would_write_is_refused_and_changes_nothing(store, statement):
    """Refused, or not even SQL to this backend (SQLite has no SET, nor DELETE inside WITH)."""
    with pytest.raises(StoreError, match="^refused: tracker sql is read-only|^SQL error: .* read-only query") as err:
        run_sql(store, statement)
    assert "\n" not in str(err.value)
    assert intact(store)


def test_several_statements_are_refused_before_any_runs(store, tmp_path):
    pwned = tmp_path / "pwned"
    for statement in (f"SELECT 1; COPY (SELECT 1) TO PROGRAM 'touch {pwned}'", "SELECT 1; SELECT 2"):
        with pytest.raises(StoreError, match="^refused: tracker sql is read-only and runs one statement at a time"):
            run_sql(store, statement)
    assert not pwned.exists() and intact(store)


@pytest.mark.parametrize(
    "statement, reaches",
    [
        ('SELECT "pg_terminate_backend"(pg_backend_pid())', "pg_terminate_backend"),
        ('SELECT pg_catalog."pg_cancel_backend"(pg_backend_pid())', "pg_cancel_backend"),
        ("SELECT 1 /* /* */ , pg_terminate_backend(1) */ , pg_terminate_backend(2)", "pg_terminate_backend"),
        ("SELECT PG_TERMINATE_BACKEND (pg_backend_pid())", "pg_terminate_backend"),
        ("SELECT set_config('default_transaction_read_only', 'off', false)", "set_config"),
        ("SELECT * FROM pg_ls_dir('.')", "pg_ls_dir"),
        ("SELECT pg_read_file('/etc/hostname')", "pg_read_file"),
        ("/* a comment first */ select lo_export(1, '/tmp/tracker-lo')", "lo_export"),
        ("SELECT query_to_xml('SELECT pg_terminate_backend(1)', true, true, '')", "query_to_xml"),
        ("SELECT pg_advisory_lock(72531)", "pg_advisory_lock"),
        ("SELECT pg_reload_conf()", "pg_reload_conf"),
        ("SELECT layer FROM layer_phase WHERE pg_notify('x', layer) IS NULL", "pg_notify"),
    ],
)
def test_functions_that_act_outside_the_transaction_are_refused_whatever_their_spelling(store, statement, reaches):
    postgres_only(store)
    # the reader's own privileges refuse most before the plan is read; the plan check the rest
    with pytest.raises(
        StoreError,
        match=rf"^refused: tracker sql is read-only(, and {reaches}\(\) reaches| "
        rf"\(permission denied for function {reaches}\))",
    ):
        run_sql(store, statement)
    assert intact(store)


@pytest.mark.parametrize(
    "statement",
    [
        "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",
        "SET default_transaction_read_only = off",
        "COPY (SELECT * FROM run) TO '/tmp/tracker-copy.csv'",
        "DO $$ BEGIN DELETE FROM run; END $$",
        "CALL nothing()",
        "SELECT * FROM run FOR UPDATE",
    ],
)
def test_postgresql_commands_beside_a_query_are_refused(store, statement):
    postgres_only(store)
    with pytest.raises(StoreError, match="read-only"):
        run_sql(store, statement)
    assert intact(store) and not Path("/tmp/tracker-copy.csv").exists()


@pytest.mark.parametrize(
    "statement",
    [
        "ATTACH DATABASE '{tmp}/new.db' AS x",
        "VACUUM INTO '{tmp}/copy.db'",
        "PRAGMA query_only = 0",
        "PRAGMA journal_mode = DELETE",
        "SELECT load_extension('{tmp}/x')",
        "ANALYZE",
    ],
)
def test_sqlite_statements_beside_a_query_are_refused_and_create_no_file(tmp_path, statement):
    path = tmp_path / "trace.db"
    profile(str(path), build("alexnet"), 4, backend="model")
    before = path.read_bytes()
    store = open_store(str(path), write=False)
    with pytest.raises(StoreError, match="^refused: tracker sql is read-only and runs queries, not"):
        run_sql(store, statement.format(tmp=tmp_path))
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["trace.db"]


def test_what_a_reader_needs_is_allowed(store):
    """Views, CTEs, LIKE with '%' and ':name' in text (no placeholder layer), and on SQLite the
    pragmas that describe a table."""
    columns, rows = run_sql(
        store,
        "SELECT layer FROM layer_phase WHERE layer LIKE 'conv%' AND '12:30' <> ':x' "
        "AND phase = 'fwd' ORDER BY layer_id",
    )
    assert columns == ["layer"] and rows == [(f"conv{i}",) for i in range(1, 6)]
    assert run_sql(store, "WITH t AS (SELECT COUNT(*) AS n FROM layer) SELECT n FROM t;")[1] == [(21,)]
    if store.engine.dialect.name == "sqlite":
        assert ("batch",) in [(row[1],) for row in run_sql(store, "PRAGMA table_info(run)")[1]]


def test_sql_errors_are_one_line(store):
    with pytest.raises(StoreError, match="^SQL error") as err:
        run_sql(store, "SELEC * FROM run")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("what", ["pg_sleep(3600)", "endless"])
def test_a_query_that_never_ends_stops_at_its_time_limit(store, what):
    if what == "pg_sleep(3600)":
        postgres_only(store)
        statement = "SELECT pg_sleep(3600)"
    else:
        statement = ENDLESS.format("COUNT(*)")
    started = time.monotonic()
    with pytest.raises(StoreError, match=r"ran past its time limit of 0.5 s \(--timeout\)"):
        run_sql(store, statement, timeout_s=0.5)
    assert time.monotonic() - started < 3
    assert intact(store)


def test_rows_stream(store):
    """An endless query's first rows: only a result that streams can give them."""
    with query(store, ENDLESS.format("x"), timeout_s=30) as answer:
        first = [next(answer.rows) for _ in range(2500)]
    assert answer.columns == ["x"] and first[-1] == (2500,)
    assert run_sql(store, ENDLESS.format("x"), limit=3)[1] == [(1,), (2,), (3,)]


@pytest.mark.slow
def test_a_big_result_streams_to_the_output_in_bounded_memory(db, store):
    rows = 2_000_000
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"""
import resource, subprocess, sys
out = subprocess.run([sys.executable, "-m", "tracker", "sql", {json.dumps(ENDLESS.format("x, 'layer ' || x"))},
                      "--limit", "{rows}", "--format", "csv", "--timeout", "300", "--db", {json.dumps(db)}],
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
print(out.returncode, out.stdout.count(b"\\n"), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
""",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    code, lines, peak_kib = map(int, done.stdout.split())
    assert code == 0 and lines == rows + 1
    assert peak_kib < 250 * 1024  # holding 2 M rows would take well over a gigabyte


def test_the_cli_streams_csv_and_json_and_limits_the_table(db, store):
    out = subprocess.run(
        [sys.executable, "-m", "tracker", "sql", ENDLESS.format("x"), "--limit", "3", "--format", "json", "--db", db],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(out.stdout) == [{"x": 1}, {"x": 2}, {"x": 3}]
    out = subprocess.run(
        [sys.executable, "-m", "tracker", "sql", "SELECT layer_id, phase FROM layer_phase", "--limit", "2", "--db", db],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert len(out.stdout.splitlines()) == 4 and "the first 2 rows" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "tracker", "sql", "SELECT 1 AS x WHERE 1 = 0", "--format", "json", "--db", db],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(out.stdout) == []


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_stops_the_query_at_once_and_on_the_server(db, store, signum):
    postgresql = store.engine.dialect.name == "postgresql"
    started = time.time()
    with tracker(
        db, "SELECT pg_sleep(3600)" if postgresql else ENDLESS.format("COUNT(*)"), "--timeout", "600"
    ) as process:
        if postgresql:
            wait_until(lambda: still_running(store, started) == 1)
        else:
            time.sleep(2)  # started, and inside SQLite's loop
        process.send_signal(signum)
        sent = time.monotonic()
        _, stderr = process.communicate(timeout=30)
    assert time.monotonic() - sent < 2 and process.returncode == 130
    assert stderr.splitlines()[-1] == "Error: interrupted"
    assert not postgresql or still_running(store, started) == 0  # cancelled on the server before the client ended


@pytest.mark.slow
def test_a_killed_client_leaves_no_query_on_the_server(db, store):
    postgres_only(store)
    started = time.time()
    with tracker(db, "SELECT pg_sleep(3600)", "--timeout", "600") as process:
        wait_until(lambda: still_running(store, started) == 1)
        process.kill()
    wait_until(lambda: still_running(store, started) == 0, limit_s=5)  # the server looks for its client every second


def still_running(store, since: float) -> int:
    """How many PostgreSQL sessions opened since ``since`` (a time.time()) are fetching from
    tracker sql's cursor."""
    with store.engine.connect() as conn:
        return conn.exec_driver_sql(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE state = 'active' "
            "AND query LIKE 'FETCH %%tracker_sql%%' AND backend_start >= to_timestamp(%(t)s)",
            {"t": since - 1},
        ).scalar()


def wait_until(condition, limit_s: float = 20) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.1)


def test_a_superuser_is_refused_without_a_reader(store, monkeypatch):
    """The store's own role (a superuser in CI) may not run user SQL; the reader role may."""
    postgres_only(store)
    assert run_sql(store, "SELECT 1")[1] == [(1,)]  # through $TRACKER_READER_URL (conftest)
    monkeypatch.delenv("TRACKER_READER_URL")
    with pytest.raises(StoreError, match="^refused: .* can only read, and .*--reader-url URL") as err:
        run_sql(store, "SELECT 1")
    assert "\n" not in str(err.value)


def test_the_time_limit_is_checked_where_it_enters(store, runner, db):
    with pytest.raises(StoreError, match="positive number of seconds"):
        run_sql(store, "SELECT 1", timeout_s=0)
    assert runner.invoke(cli, ["sql", "SELECT 1", "--timeout", "-1", "--db", db]).exit_code == 2


def test_the_help_states_the_librarys_default_time_limit(runner):
    from tracker.store.sql import DEFAULT_TIMEOUT_S

    assert f"default {DEFAULT_TIMEOUT_S:g}" in " ".join(runner.invoke(cli, ["sql", "--help"]).output.split())


def test_an_empty_answer_says_why_where_the_runs_asked_for_hold_nothing_of_its_kind(db, store, runner):
    """A model run measured nothing: a query of counters or times over it returns no rows, and says
    why (from the relations it names and the run table, after the query), in the table and beside
    CSV; where the runs could have answered, or the query reads predictions, no reason is made up."""

    def said(statement: str, *args: str):
        result = runner.invoke(cli, ["sql", statement, "--db", db, *args])
        assert result.exit_code == 0, result.output
        return result

    model = "run 1 is a model run: nothing was measured"
    assert said("SELECT * FROM stall_breakdown").stdout == f"(no rows: stall_breakdown holds counters, and {model})\n"
    assert said("select phase from LAYER_TIME where run_id = 1").stdout == (
        f"(no rows: layer_time holds measurements, and {model})\n"
    )
    assert said("SELECT * FROM launch WHERE run_id IN (5, 6)").stdout == (
        "(no rows: launch holds measurements, and the store holds no runs 5, 6)\n"
    )
    assert said("SELECT * FROM layer_phase WHERE layer = 'none'").stdout == "(no rows)\n"  # predictions: no excuse
    csv = said("SELECT * FROM cache_hit_rate", "--format", "csv")
    assert csv.stdout.startswith("run_id,") and len(csv.stdout.splitlines()) == 1
    assert csv.stderr == f"note: no rows: cache_hit_rate holds counters, and {model}\n"


def test_an_empty_answer_from_recorded_gpu_runs_says_why_only_where_they_lack_it(runner, tmp_path):
    """On the H100's recordings: the events runs stored times and no counters; the ncu run both."""
    from recorded import B16, L1_BYPASS, recording

    events = recording(L1_BYPASS, tmp_path)
    result = runner.invoke(cli, ["sql", "SELECT * FROM stall_breakdown WHERE run_id = 1", "--db", events])
    assert result.stdout == (
        "(no rows: stall_breakdown holds counters, and run 1 ran the events backend: no counters were collected)\n"
    )
    for db, statement in (
        (events, "SELECT * FROM layer_time WHERE run_id = 1 AND phase = 'none'"),
        (recording(B16, tmp_path), "SELECT * FROM stall_breakdown WHERE layer = 'none'"),
    ):
        result = runner.invoke(cli, ["sql", statement, "--db", db])
        assert result.stdout == "(no rows)\n", result.output
