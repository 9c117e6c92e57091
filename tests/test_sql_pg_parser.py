"""`tracker sql` on PostgreSQL reads a statement with PostgreSQL's own parser (pglast) and checks
every name in it against the catalog before the server plans anything: what a lexer of tracker's
own read otherwise (a `--` comment ended by a carriage return, U& escapes) is the server's reading;
a call in LIMIT, OFFSET, a window frame, TABLESAMPLE, a VALUES list or a WITH query is checked; an
administrator's IMMUTABLE SECURITY DEFINER function, reached by a call, an operator, a cast or a
view, never runs; no advisory lock is taken or waited on; numbers of any size print. The parser
tests need no server; the rest skip without one (TRACKER_TEST_PG_URL)."""

from __future__ import annotations

import os
import threading
import time
from decimal import Decimal

import pytest

from tests.conftest import PG_URL, admin
from tracker.cli import cli
from tracker.errors import StoreError
from tracker.nets import build
from tracker.profile import profile
from tracker.store import open_store, run_sql

HIDDEN = [  # calls a lexer that ends `--` comments at \n alone never saw
    "SELECT 1 LIMIT 1 --\r + pg_advisory_lock(72532)\n",
    "SELECT 1 OFFSET 0 --\r + length(pg_advisory_lock(72532)::text || pg_sleep(30)::text)\n",
    "SELECT 1 LIMIT 1 --\r + length(pg_notify('tracker', 'x')::text)\n",
    "SELECT 1 OFFSET 0 --\r + txid_current()\n",
    "SELECT 1 LIMIT 1 --\r + pg_try_advisory_xact_lock_shared(72532)::int\n",
]
SPELLINGS = [  # quoted, qualified, escaped, and in every clause of a query
    'SELECT "pg_advisory_lock"(72532)',
    'SELECT pg_catalog."pg_advisory_lock"(72532)',
    "SELECT PG_CATALOG . PG_ADVISORY_LOCK (72532)",
    'SELECT U&"\\0070g_advisory_lock"(72532)',
    "SELECT 1 LIMIT (SELECT pg_advisory_lock(1)::text)::int",
    "SELECT 1 OFFSET pg_advisory_lock(1)::text::int",
    "WITH x AS (SELECT pg_advisory_xact_lock(1)) SELECT 1",
    "VALUES (1), (length(pg_advisory_lock(1)::text))",
    "SELECT 1 FROM pg_class TABLESAMPLE system (length(pg_advisory_lock(1)::text))",
    "SELECT sum(1) OVER (ROWS length(pg_advisory_lock(1)::text) PRECEDING)",
    "SELECT * FROM pg_advisory_lock(1)",
    "SELECT 1 ORDER BY pg_advisory_lock(1)",
    "SELECT 1 GROUP BY pg_advisory_lock(1)",
    "SELECT 1 HAVING pg_advisory_lock(1) IS NULL",
    "SELECT 1 /* /* */ pg_terminate_backend(1) */, $$ $x$ $$, pg_advisory_lock(1)",
    "SELECT 1 WHERE EXISTS (SELECT pg_advisory_unlock_all())",
]


@pytest.mark.parametrize("statement", HIDDEN + SPELLINGS)
def test_the_parser_finds_every_call_however_it_is_written(statement):
    from tracker.store.sql import read_query

    with pytest.raises(
        StoreError,
        match=r"^refused: tracker sql is read-only, and \w+\(\) reaches (other "
        r"sessions|the server)$",
    ):
        read_query(statement)


@pytest.mark.parametrize(
    "statement, refusal",
    [
        ("WITH gone AS (DELETE FROM run RETURNING id) SELECT * FROM gone", "holds DELETE"),
        (
            "WITH x AS (SELECT 1) SELECT * FROM (WITH y AS (UPDATE run SET batch = 1 RETURNING 1) SELECT 1) s",
            "holds UPDATE",
        ),
        ("SELECT 1 INTO stolen", "SELECT INTO makes a table"),
        ("SELECT * FROM run FOR KEY SHARE", "FOR UPDATE or FOR SHARE"),
        ("/* first */ DELETE FROM run", "runs one query .SELECT, WITH or VALUES., not DELETE$"),
        ("SELECT 1;\r SELECT 2", "runs one statement at a time$"),
        ("-- nothing\r", "holds none$"),
    ],
)
def test_only_one_query_that_neither_writes_nor_locks_is_read(statement, refusal):
    from tracker.store.sql import read_query

    with pytest.raises(StoreError, match=f"^refused: tracker sql is read-only.*{refusal}"):
        read_query(statement)


def test_the_server_is_given_the_tree_that_was_checked_not_the_users_text():
    from tracker.store.sql import read_query

    assert read_query("SELECT 1 -- and then\r, 2 /* nested /* */ */ ; ").text == "SELECT 1, 2"
    assert read_query('SELECT $q$it\'s$q$ AS "a b"').text == "SELECT 'it''s' AS \"a b\""


def test_the_parser_names_what_may_run_code():
    from tracker.store.sql import read_query

    query = read_query(
        "WITH w AS (SELECT 1 AS v) SELECT r.own, (r).other, '1'::s.t, a OPERATOR(s.###) b, "
        "x IN (SELECT 1) FROM s.view r, w, f(1) ORDER BY 1 USING ~<~"
    )
    assert {("s", "view"), (None, "w")} <= query.relations and query.ctes == {"w"}
    assert {(None, "f")} <= query.functions and {"own", "other"} <= query.members
    assert {("s", "###"), (None, "~<~"), (None, "=")} <= query.operators
    assert {("s", "t"), (None, "f")} <= query.types


def test_a_parse_error_is_one_line():
    from tracker.store.sql import read_query

    with pytest.raises(StoreError, match=r"^SQL error: syntax error at or near \"FROM\".*read-only query"):
        read_query("SELECT FROM FROM")


# Numbers of any size, in every format


@pytest.mark.parametrize(
    "value, plain",
    [
        (Decimal("1" + "0" * 131071), "1" + "0" * 131071),
        (Decimal("1e400"), "1E+400"),
        (Decimal("-15e308"), "-1.5E+309"),
    ],
)
def test_a_decimal_of_any_size_is_a_number_that_prints(value, plain):
    from tracker.store import queries

    assert queries.plain(value) == plain


def test_an_infinite_decimal_is_a_float_and_others_numbers_as_before():
    from tracker.store.queries import plain

    assert plain(Decimal("Infinity")) == float("inf") and plain(Decimal("-Infinity")) == float("-inf")
    assert plain(Decimal(12)) == 12 and plain(Decimal("0.5")) == 0.5


# On a server


@pytest.fixture
def store(pg_url):
    profile(pg_url, build("alexnet"), 4, backend="model")
    return open_store(pg_url, write=False)


def schema_of(store) -> str:
    with store.engine.connect() as conn:
        return conn.exec_driver_sql("SELECT current_schema()").scalar()


def server_dsn() -> str:
    from sqlalchemy import make_url

    url = make_url(PG_URL)
    return f"host={url.host} port={url.port or 5432} dbname={url.database} user={url.username}"


@pytest.fixture
def spy(store):
    """A superuser's IMMUTABLE SECURITY DEFINER function, spy(int), that records each call in
    spy_calls through a connection of its own (dblink: the query's transaction is read-only), and
    what reaches it: an operator ###, a view spy_view, spy_row(run), spy_text(int) for a cast.
    Yields a function that counts the calls."""
    schema = schema_of(store)
    with admin() as conn:
        conn.execute("CREATE SCHEMA spy_ext; CREATE EXTENSION dblink SCHEMA spy_ext")
        conn.execute("CREATE TABLE public.spy_calls (at timestamptz)")
    try:
        with admin() as conn:
            conn.execute(f"""CREATE FUNCTION {schema}.spy(int) RETURNS int LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
                AS $$ BEGIN PERFORM spy_ext.dblink_exec('{server_dsn()}',
                'INSERT INTO public.spy_calls VALUES (now())');
                RETURN $1; END $$""")
            conn.execute(
                f"CREATE FUNCTION {schema}.spy2(int, int) RETURNS int LANGUAGE sql IMMUTABLE SECURITY DEFINER "
                f"AS 'SELECT {schema}.spy($1)'"
            )
            conn.execute(f"CREATE OPERATOR {schema}.### (LEFTARG = int, RIGHTARG = int, FUNCTION = {schema}.spy2)")
            conn.execute(
                f"CREATE FUNCTION {schema}.spy_text(int) RETURNS text LANGUAGE sql IMMUTABLE SECURITY DEFINER "
                f"AS 'SELECT {schema}.spy($1)::varchar'"
            )
            conn.execute(f"CREATE VIEW {schema}.spy_view AS SELECT {schema}.spy(1) AS x")
            conn.execute(
                f"CREATE FUNCTION {schema}.spy_row({schema}.run) RETURNS int LANGUAGE sql IMMUTABLE "
                f"SECURITY DEFINER AS 'SELECT {schema}.spy(1)'"
            )
            conn.execute(f"GRANT SELECT ON {schema}.spy_view TO PUBLIC")

        def calls() -> int:
            with admin() as conn:
                return conn.execute("SELECT count(*) FROM public.spy_calls").fetchone()[0]

        yield calls
    finally:
        with admin() as conn:
            conn.execute("DROP CAST IF EXISTS (int AS text); DROP TABLE public.spy_calls")
            conn.execute(
                f"DROP FUNCTION IF EXISTS {schema}.spy_row({schema}.run), {schema}.spy_text(int), "
                f"{schema}.spy2(int, int), {schema}.spy(int) CASCADE"
            )
            conn.execute("DROP SCHEMA spy_ext CASCADE")


@pytest.mark.postgres
def test_the_spy_records_a_call(store, spy):
    with admin() as conn:
        conn.execute(f"SELECT {schema_of(store)}.spy(1)")
    assert spy() == 1


@pytest.mark.postgres
@pytest.mark.parametrize(
    "statement, refusal",
    [
        ("SELECT {schema}.spy(1)", r"not \w+\.spy\(\) from schema \w+$"),
        ('SELECT "{schema}"."spy"(1)', r"not \w+\.spy\(\) from schema \w+$"),
        ("SELECT 1 LIMIT 1 --\r + {schema}.spy(1)\n", r"not \w+\.spy\(\)"),
        ("SELECT 1 OFFSET spy(0)", r"not \w+\.spy\(\)"),
        ("VALUES (1), (spy(1))", r"not \w+\.spy\(\)"),
        ("SELECT 1 ### 2", r"not \w+\.spy2\(\) from schema \w+, which the operator \w+\.### runs$"),
        ("SELECT 1 LIMIT 1 OPERATOR({schema}.###) 1", r"which the operator \w+\.### runs$"),
        ("SELECT r.spy_row FROM run r", r"not \w+\.spy_row\(\)"),
        (
            "SELECT * FROM {schema}.spy_view",
            (
                r"reads only the store's tables and views and the system catalogs, "
                r"not \w+\.spy_view$"
            ),
        ),
        ("WITH spy_view AS (SELECT 1) SELECT * FROM (SELECT 1) s, {schema}.spy_view", r"not \w+\.spy_view"),
    ],
)
def test_an_administrators_function_never_runs_as_its_owner(store, spy, statement, refusal):
    """Checked in the catalog before any EXPLAIN or DECLARE: the planner would fold the IMMUTABLE
    function, running it as its owner, before the plan check could refuse it."""
    with pytest.raises(StoreError, match=f"^refused: .*{refusal}"):
        run_sql(store, statement.format(schema=schema_of(store)))
    assert spy() == 0


@pytest.mark.postgres
def test_a_cast_that_runs_an_administrators_function_is_refused_before_it_runs(store, spy):
    """Any query may cast between PostgreSQL's own types without writing the cast: while the
    database holds one that runs a function outside pg_catalog, every query is refused."""
    assert run_sql(store, "SELECT 1::text")[1] == [("1",)]
    schema = schema_of(store)
    with admin() as conn:
        conn.execute(f"CREATE CAST (int AS text) WITH FUNCTION {schema}.spy_text(int)")
    for statement in ("SELECT 1::text", "SELECT 1 FROM run LIMIT 1 --\r + length(2::text)\n"):
        with pytest.raises(
            StoreError,
            match=r"^refused: .* not \w+\.spy_text\(\) from schema \w+, which the "
            r"cast from integer to text runs$",
        ):
            run_sql(store, statement)
    assert spy() == 0


@pytest.mark.postgres
def test_the_store_and_the_catalogs_are_read_and_an_unknown_relation_is_an_error(store):
    assert run_sql(store, "SELECT count(*) > 0 FROM pg_catalog.pg_class")[1] == [(True,)]
    assert run_sql(store, "SELECT count(*) > 0 FROM information_schema.tables")[1] == [(True,)]
    assert run_sql(store, "WITH r AS (SELECT batch FROM run) SELECT batch, 2 IN (1, 2) FROM r")[1] == [(4, True)]
    with pytest.raises(StoreError, match='^SQL error: relation "nowhere" does not exist$'):
        run_sql(store, "SELECT * FROM nowhere")


@pytest.mark.postgres
def test_dblink_is_refused_wherever_it_is_called(store):
    """With the extension installed, a call hidden after `--\\r` in LIMIT is read too."""
    schema = schema_of(store)
    with admin() as conn:
        conn.execute(f"CREATE EXTENSION IF NOT EXISTS dblink SCHEMA {schema}")
    try:
        target = f"{server_dsn()} options=-csearch_path={schema}"
        for statement in (
            f"SELECT 1 LIMIT 1 --\r + length(dblink_exec('{target}', 'DELETE FROM run'))\n",
            f"SELECT * FROM {schema}.dblink('{target}', 'SELECT 1') AS t(x int)",
            f'SELECT "{schema}"."dblink_connect"(\'{target}\')',
        ):
            with pytest.raises(StoreError, match=r"^refused: tracker sql is read-only, and dblink\w*\(\) reaches"):
                run_sql(store, statement)
        assert run_sql(store, "SELECT count(*) FROM run")[1] == [(1,)]
    finally:
        with admin() as conn:
            conn.execute("DROP EXTENSION IF EXISTS dblink")


@pytest.mark.postgres
def test_a_query_neither_takes_nor_holds_the_experiments_lock(store):
    """The probe's attack: pg_advisory_lock after `--\\r` in LIMIT held tracker experiment's
    planning lock for as long as the query ran. Refused, it holds nothing while it would run."""
    from tracker.store.experiments import _PG_PLANNING_LOCK

    errors: list[Exception] = []
    attack = f"SELECT 1 LIMIT 1 --\r + length(pg_advisory_lock({_PG_PLANNING_LOCK})::text || pg_sleep(5)::text)\n"

    def run() -> None:
        try:
            run_sql(store, attack, timeout_s=10)
        except StoreError as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(1.5)
    with admin() as conn:
        taken = conn.execute(f"SELECT pg_try_advisory_lock({_PG_PLANNING_LOCK})").fetchone()[0]
        conn.execute("SELECT pg_advisory_unlock_all()")
    thread.join()
    assert taken and len(errors) == 1 and str(errors[0]).endswith("pg_advisory_lock() reaches other sessions")


@pytest.mark.postgres
def test_a_query_waits_at_most_a_second_for_a_locked_table(store):
    """A table locked by another session (as an upgrade locks it): the query gives up in about
    LOCK_WAIT_MS, in one line, rather than wait out its time limit."""
    import psycopg
    from sqlalchemy import make_url

    schema = schema_of(store)
    url = make_url(PG_URL).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url) as locker:
        locker.execute(f"LOCK TABLE {schema}.run IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(StoreError, match=r"^the query waited 1 s for a table another session holds"):
            run_sql(store, "SELECT * FROM run", timeout_s=20)
        assert time.monotonic() - started < 8
        locker.rollback()


@pytest.mark.postgres
@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_numbers_of_any_size_print_in_every_format(store, runner, fmt):
    statement = "SELECT 1e131071::numeric AS big, 'Infinity'::numeric AS inf, 2.5 AS x FROM generate_series(1, 3)"
    result = runner.invoke(
        cli,
        ["sql", statement, "--db", store.where, "--format", fmt],
        env={"TRACKER_READER_URL": os.environ["TRACKER_READER_URL"]},
    )
    assert result.exit_code == 0, result.output[-300:]
    digits = "1" + "0" * 131071
    if fmt == "table":  # a table shows the start of a long value and its length
        assert result.output.count("... (131,072 characters)") == 3 and digits[:200] in result.output
    else:
        assert result.output.count(digits) == 3
