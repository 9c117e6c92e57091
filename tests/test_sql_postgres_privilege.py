"""`tracker sql` on PostgreSQL is safe by the role it runs as: every attack class a probe
found, run as a reader role (conftest's ``PG_READER``), is refused or does no harm; a role that
could do more (a superuser, a member of a role that reaches files, programs or other sessions, the
role that writes the store) is refused before the statement runs, in one line that says how to
fix it; `tracker reader-role` makes a reader that can query tracker's views. The plan check is
the second guard: it reads EXPLAIN's JSON as structure, and the statement's text for what EXPLAIN
does not show. They skip without a PostgreSQL server (TRACKER_TEST_PG_URL)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import PG_URL, admin
from tracker.cli import cli
from tracker.errors import StoreError
from tracker.nets import build
from tracker.profile import profile
from tracker.store import open_store, run_sql
from tracker.store.reader import role_sql

pytestmark = pytest.mark.postgres
LOOT = Path("/tmp/tracker-issue44-loot")


@pytest.fixture
def store(pg_url):
    """A read-only store of one model run of AlexNet at batch 4, read through conftest's reader."""
    profile(pg_url, build("alexnet"), 4, backend="model")
    return open_store(pg_url, write=False)


@contextmanager
def session(url: str) -> Iterator:
    """An idle session, as another user's, whose pid an attack aims at."""
    import psycopg
    from sqlalchemy import make_url

    with psycopg.connect(
        make_url(url).set(drivername="postgresql").render_as_string(hide_password=False), autocommit=True
    ) as conn:
        yield conn


def schema_of(store) -> str:
    with store.engine.connect() as conn:
        return conn.exec_driver_sql("SELECT current_schema()").scalar()


# Each attack class of the probe; {reader} and {owner} are the pids of idle sessions of the reader
# role and of the store's owner, {dsn} a connection string to the server as the superuser.
ATTACKS = [
    "VALUES (pg_read_file('/etc/passwd'))",
    "VALUES ('x'), (pg_read_file('/etc/passwd'))",  # a VALUES list EXPLAIN does not show
    "SELECT 1 LIMIT pg_terminate_backend({reader})::int + 1",  # nor a LIMIT
    "SELECT 1 OFFSET pg_cancel_backend({owner})::int",
    "SELECT 1 LIMIT pg_terminate_backend({owner})::int + 1",
    "SELECT 1 AS \"it's\", pg_terminate_backend({reader}), 'x'",  # a quote inside a quoted name
    "SELECT ts_rewrite('a'::tsquery, 'SELECT pg_terminate_backend({owner})::text::tsquery, ''b''::tsquery')",
    "VALUES (NULL), (ts_rewrite('a'::tsquery, 'SELECT pg_reload_conf()::text::tsquery, ''b''::tsquery'))",
    "SELECT query_to_xml('SELECT pg_terminate_backend({reader})', true, true, '')",
    "SELECT cursor_to_xml('tracker_sql', 1, true, true, '')",
    "SELECT pg_read_file('postgresql.conf')",
    "SELECT * FROM pg_hba_file_rules",
    "SELECT * FROM pg_file_settings",
    "SELECT pg_reload_conf()",
    "SELECT set_config('statement_timeout', '0', false)",
    "VALUES (1), (set_config('work_mem', '1GB', false)::int)",
    "SELECT set_config('role', 'postgres', true), pg_read_file('/etc/passwd')",
    "SELECT pg_cancel_backend({reader})",
    "SELECT 1 FROM run WHERE pg_terminate_backend({reader})",
    "SELECT brin_summarize_new_values('run_pkey')",
    "SELECT gin_clean_pending_list('run_pkey')",
    "SELECT lo_import('/etc/passwd')",
    f"SELECT lo_export(1, '{LOOT}')",
    "SELECT pg_ls_dir('.')",
    "SELECT pg_stat_file('postgresql.conf')",
    "SELECT pg_advisory_lock(44)",
    "SELECT pg_notify('x', 'y')",
    "SELECT 1 FROM /* pg_terminate_backend( */ run r(a) LIMIT (SELECT pg_cancel_backend({reader})::int)",
    'SELECT PG_CATALOG . "pg_terminate_backend" ({reader})',
]


@pytest.mark.parametrize("attack", ATTACKS)
def test_every_attack_as_the_reader_is_refused_or_harmless(store, pg_url, attack):
    import os

    with session(os.environ["TRACKER_READER_URL"]) as reader, session(pg_url) as owner:
        pids = {"reader": reader.info.backend_pid, "owner": owner.info.backend_pid}
        work_mem = {conn: conn.execute("SELECT current_setting('work_mem')").fetchone() for conn in (reader, owner)}
        try:
            columns, rows = run_sql(store, attack.format(**pids), timeout_s=20)
        except StoreError as exc:
            assert str(exc).startswith(("refused: ", "SQL error: ")) and "\n" not in str(exc)
        else:
            assert "root:" not in repr(rows)  # /etc/passwd
        for conn in (reader, owner):  # both sessions alive, untouched
            assert conn.execute("SELECT current_setting('work_mem')").fetchone() == work_mem[conn]
    assert_unharmed(store)


def assert_unharmed(store) -> None:
    assert run_sql(store, "SELECT batch, status FROM run")[1] == [(4, "complete")]
    assert not LOOT.exists()
    with admin() as conn:
        assert conn.execute("SELECT current_setting('statement_timeout')").fetchone() == ("0",)


@pytest.mark.parametrize(
    "statement, refusal",
    [
        ("VALUES ('x'), (pg_terminate_backend(1)::text)", r"pg_terminate_backend\(\) reaches other sessions"),
        ("SELECT 1 LIMIT pg_cancel_backend(1)::int", r"pg_cancel_backend\(\) reaches other sessions"),
        ("SELECT 1 AS \"a'b\", pg_notify('x', 'y')", r"pg_notify\(\) reaches other sessions"),
        ("SELECT ts_rewrite('a'::tsquery, 'SELECT 1')", r"ts_rewrite\(\) reaches SQL inside a string"),
        ("SELECT 1 FROM run ORDER BY sum(id) OVER (ROWS pg_cancel_backend(1)::int PRECEDING)", "pg_cancel_backend"),
        (
            'SELECT U&"\\0070g_cancel_backend"(1)',
            r"pg_cancel_backend\(\) reaches other sessions",
        ),  # read as the server does
    ],
)
def test_the_plan_check_sees_what_explain_hides(store, statement, refusal):
    """The second guard, as the reader: what EXPLAIN's JSON leaves out is read from the statement."""
    with pytest.raises(StoreError, match=f"^refused: .*{refusal}"):
        run_sql(store, statement)


def test_a_function_from_an_extension_is_refused(store):
    """dblink runs SQL through a connection of its own: its functions, and any outside pg_catalog,
    are refused by the plan check, and as a reader dblink connects to nothing (no password)."""
    schema = schema_of(store)
    with admin() as conn:
        if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'dblink'").fetchone():
            pytest.skip("dblink is installed in this database already")
        conn.execute(f"CREATE EXTENSION dblink SCHEMA {schema}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO tracker_test_reader")
    dsn = PG_URL.split("://", 1)[1]  # postgres@host:port/db
    user_host, database = dsn.rsplit("/", 1)
    user, host_port = user_host.split("@")
    host, port = host_port.split(":")
    target = f"host={host} port={port} dbname={database} user={user} options=-csearch_path={schema}"
    try:
        for statement in (
            f"SELECT dblink_exec('{target}', 'UPDATE run SET batch = 99')",
            f"SELECT {schema}.dblink_connect('{target}')",
        ):
            with pytest.raises(StoreError, match=r"^refused: .*dblink"):
                run_sql(store, statement)
        with pytest.raises(StoreError):  # hidden from EXPLAIN, read from the text
            run_sql(store, f"VALUES (''), (dblink_exec('{target}', 'UPDATE run SET batch = 99'))")
        assert_unharmed(store)
    finally:
        with admin() as conn:
            conn.execute("DROP EXTENSION IF EXISTS dblink")


def test_a_constant_the_planner_folds_is_refused_unread(store):
    """repeat('x', 1e9) is folded into the plan: the plan is measured on the server, under the
    time limit, and refused without reaching this process."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(StoreError, match=r"^refused: the query's plan is \d+ MiB, over tracker sql's 1 MiB"):
        run_sql(store, "SELECT repeat('x', 200000000) || random()::text", timeout_s=30)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024  # KiB: nothing near 200 MB


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT repeat('x', (200000000 + random() * 0)::int)",  # built on the server, unfolded: no plan shows it
        "SELECT repeat('x', 20000 + (random() * 0)::int) FROM generate_series(1, 1000)",  # 20 MB in one fetch's rows
    ],
)
def test_rows_too_large_to_fetch_are_refused_on_the_server(store, statement, runner):
    """The gap the guard leaves: a value the planner does not fold is not in the plan, and a fetch
    of it would take the client's memory. The server counts the bytes of every FETCH_ROWS rows in
    a row and ends the query past FETCH_BYTES, before they are sent."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(
        StoreError,
        match=r"^refused: 1,000 rows in a row hold [\d,]+ bytes on the server, over "
        r"the 16 MiB tracker sql fetches at a time",
    ):
        run_sql(store, statement, timeout_s=60)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024  # KiB: not the 200 MB
    done = runner.invoke(cli, ["sql", statement, "--db", store.where])
    assert done.exit_code != 0 and done.output.startswith("Error: refused: 1,000 rows in a row hold ")
    assert done.output.count("\n") == 1


def test_the_bound_keeps_the_querys_rows_order_and_columns(store):
    """The wrapped query is the user's: its order across fetches, its column names (a repeated
    one too), the rows just under the bound; a trailing semicolon and comment are dropped, and a
    second statement is refused as before."""
    columns, rows = run_sql(store, "SELECT x AS a, -x AS a FROM generate_series(1, 2500) x ORDER BY x DESC; -- last")
    assert columns == ["a", "a"] and rows == [(x, -x) for x in range(2500, 0, -1)]
    _, rows = run_sql(store, "SELECT repeat('x', 15000) FROM generate_series(1, 1000) /* 15 MB */ ;;")
    assert len(rows) == 1000 and {len(r[0]) for r in rows} == {15000}
    with pytest.raises(StoreError, match="^refused: tracker sql is read-only and runs one statement at a time$"):
        run_sql(store, "SELECT 1; SELECT 2")
    assert run_sql(store, "VALUES (1, 'a'), (2, 'b')") == (["column1", "column2"], [(1, "a"), (2, "b")])


@pytest.fixture
def without_reader(monkeypatch):
    monkeypatch.delenv("TRACKER_READER_URL")


def test_a_superuser_is_refused_up_front_with_the_fix(store, pg_url, without_reader, runner):
    with pytest.raises(
        StoreError,
        match=r"^refused: tracker sql runs queries only as a role that can only read, "
        r"and 'postgres' is a superuser: give a role that can only read with "
        r"--reader-url URL or \$TRACKER_READER_URL \(`tracker reader-role",
    ) as err:
        run_sql(store, "SELECT 1")
    assert "\n" not in str(err.value)
    result = runner.invoke(cli, ["sql", "SELECT pg_read_file('/etc/passwd')", "--db", pg_url])
    assert result.exit_code == 1 and "root:" not in result.output
    assert result.output.count("\n") == 1 and "--reader-url" in result.output


@contextmanager
def role(store, grants: str) -> Iterator[str]:
    """A login role given ``grants`` ({name} and {schema} filled in); its URL into the store."""
    from sqlalchemy import make_url

    name, schema = f"t44_{uuid.uuid4().hex[:10]}", schema_of(store)
    with admin() as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {name}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {name}")
        for grant in grants.split(";"):
            if grant.strip():
                conn.execute(grant.format(name=name, schema=schema))
    try:
        yield (
            make_url(PG_URL).set(username=name).render_as_string(hide_password=False)
            + f"?options=-csearch_path%3D{schema}"
        )
    finally:
        with admin() as conn:
            conn.execute(f"DROP OWNED BY {name}; DROP ROLE {name}")


@pytest.mark.parametrize(
    "grants, why",
    [
        ("GRANT pg_read_server_files TO {name}", "reaches the server's files"),
        ("GRANT pg_execute_server_program TO {name}", "reaches the server's programs"),
        ("GRANT pg_signal_backend TO {name}", "reaches other sessions"),
        (
            "CREATE ROLE {name}_r NOLOGIN; GRANT pg_write_server_files TO {name}_r; ALTER ROLE {name} NOINHERIT; "
            "GRANT {name}_r TO {name}",
            "reaches the server's files through its membership in 'pg_write_server_files'",
        ),
        ("GRANT INSERT ON {schema}.run TO {name}", "writes the store"),
        ("ALTER ROLE {name} CREATEROLE", "may create roles"),
    ],
)
def test_a_role_that_reaches_beyond_reading_is_refused(store, grants, why):
    with role(store, grants) as url:
        with pytest.raises(
            StoreError,
            match=rf"^refused: tracker sql runs queries only as a role that can only "
            rf"read, and 't44_\w+' .*{why}.*--reader-url URL",
        ):
            run_sql(store, "SELECT 1", reader=url)
    with admin() as conn:  # the extra role of the NOINHERIT case
        for (name,) in conn.execute("SELECT rolname FROM pg_roles WHERE rolname ~ '^t44_.*_r$'").fetchall():
            conn.execute(f"DROP ROLE {name}")


def test_the_owner_of_the_store_is_refused(store, pg_url, without_reader):
    """A plain (not super) role that owns the store's tables: refused as one that writes it."""
    schema = schema_of(store)
    with role(store, "ALTER SCHEMA {schema} OWNER TO {name}; ALTER TABLE {schema}.run OWNER TO {name}") as url:
        with pytest.raises(StoreError, match=r"writes the store: give a role that can only read"):
            run_sql(open_store(url, write=False), "SELECT 1")
        with admin() as conn:
            conn.execute(f"ALTER TABLE {schema}.run OWNER TO postgres; ALTER SCHEMA {schema} OWNER TO postgres")


def test_the_reader_must_reach_the_same_store(store, pg_url):
    with role(store, "") as url:
        other = url.replace(f"search_path%3D{schema_of(store)}", "search_path%3Dpublic")
        with pytest.raises(StoreError, match="^(cannot open|the reader connection .* reaches other tables)"):
            run_sql(store, "SELECT 1", reader=other)


def test_the_reader_role_commands_sql_makes_a_reader_of_the_views(store, pg_url, runner, without_reader):
    from sqlalchemy import make_url

    name = f"t44_{uuid.uuid4().hex[:10]}"
    printed = runner.invoke(cli, ["reader-role", "--db", pg_url, "--name", name])
    assert printed.exit_code == 0 and f"CREATE ROLE {name} LOGIN" in printed.output
    assert f'GRANT SELECT ON "{schema_of(store)}".layer_phase TO {name};' in printed.output
    try:
        with admin() as conn:
            conn.execute(printed.output)
        url = (
            make_url(PG_URL).set(username=name).render_as_string(hide_password=False)
            + f"?options=-csearch_path%3D{schema_of(store)}"
        )
        columns, rows = run_sql(
            store, "SELECT layer, phase FROM layer_phase WHERE layer = 'conv1' ORDER BY phase", reader=url
        )
        assert rows and all(layer == "conv1" for layer, _ in rows)
        assert run_sql(store, "SELECT COUNT(*) FROM run_summary", reader=url)[1] == [(1,)]
        result = runner.invoke(
            cli, ["sql", "SELECT network FROM run_summary", "--db", pg_url, "--reader-url", url, "--format", "csv"]
        )
        assert result.exit_code == 0 and result.output.splitlines() == ["network", "alexnet"]
        again = runner.invoke(cli, ["reader-role", "--db", pg_url, "--name", name, "--apply"])  # it exists: granted
        assert again.exit_code == 0, again.output
    finally:
        with admin() as conn:
            conn.execute(f"DROP OWNED BY {name}; DROP ROLE IF EXISTS {name}")


def test_reader_role_refuses_a_sqlite_store_and_a_bad_name(tmp_path, runner):
    db = str(tmp_path / "trace.db")
    profile(db, build("alexnet"), 4, backend="model")
    result = runner.invoke(cli, ["reader-role", "--db", db])
    assert result.exit_code == 1 and "for a PostgreSQL store" in result.output
    result = runner.invoke(cli, ["sql", "SELECT 1", "--db", db, "--reader-url", "postgresql://x@nowhere/db"])
    assert result.exit_code == 1 and "leave out --reader-url" in result.output
    with pytest.raises(StoreError, match="lower-case letters"):
        role_sql("Reader; DROP ROLE x", "s", "d")
