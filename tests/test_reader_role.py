"""Who `tracker sql` runs as on PostgreSQL, and what `tracker reader-role` grants: a reader is
judged by its login (the session's user and every role it may become), not by the role a URL or a
role setting switched it to; a connection that sets a role or any setting is refused; the session
cannot change its role under the query; the role `tracker reader-role` makes reads tracker's
tables and views (and those the store's owner adds later) and nothing made by anyone else, and
carries settings that bound what its sessions spend on the server.

Each test runs in a database of its own, whose store a plain role owns, so that the attacks can
install dblink and file_fdw as a superuser does."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tests.conftest import PG_URL, admin
from tracker.cli import cli
from tracker.errors import StoreError
from tracker.nets import build
from tracker.profile import profile
from tracker.store import open_store, run_sql

pytestmark = pytest.mark.postgres


def url_of(user: str, database: str, query: str = "") -> str:
    from sqlalchemy import make_url

    url = make_url(PG_URL).set(username=user, database=database).render_as_string(hide_password=False)
    return f"{url}?{query}" if query else url


@dataclass
class Server:
    """A database of its own holding a store of one run, owned by the plain role ``owner``."""

    database: str
    owner: str
    roles: list[str] = field(default_factory=list)  # dropped afterwards

    @property
    def superuser(self) -> str:
        return url_of(make_url_user(), self.database)

    @property
    def owner_url(self) -> str:
        return url_of(self.owner, self.database)

    def role(self, suffix: str, sql: str = "") -> str:
        """A new role ``<database>_<suffix>`` (``CREATE ROLE`` + ``sql``); its name."""
        name = f"{self.database}_{suffix}"
        self.roles.append(name)
        with admin() as conn:
            conn.execute(f"CREATE ROLE {name} {sql}")
        return name

    def reader(self, suffix: str = "reader") -> str:
        """A reader made by `tracker reader-role --apply` run as the superuser; its name."""
        from click.testing import CliRunner

        name = f"{self.database}_{suffix}"
        self.roles.append(name)
        made = CliRunner().invoke(cli, ["reader-role", "--db", self.superuser, "--apply", "--name", name])
        assert made.exit_code == 0, made.output
        return name

    def url(self, role: str, query: str = "") -> str:
        return url_of(role, self.database, query)

    def runs(self) -> int:
        with admin(self.database) as conn:
            return conn.execute("SELECT COUNT(*) FROM public.run").fetchone()[0]


def make_url_user() -> str:
    from sqlalchemy import make_url

    return make_url(PG_URL).username or "postgres"


@pytest.fixture
def server(pg_url, monkeypatch) -> Iterator[Server]:
    """pg_url: conftest's skip (or failure, in CI) without a PostgreSQL server."""
    monkeypatch.delenv("TRACKER_READER_URL")
    for name in ("PGOPTIONS", "PGSERVICE", "PGSERVICEFILE", "PGGEQO"):
        monkeypatch.delenv(name, raising=False)
    there = Server(f"t74_{uuid.uuid4().hex[:10]}", "")
    there.owner = there.role("owner", "LOGIN")
    with admin() as conn:
        conn.execute(f"CREATE DATABASE {there.database} OWNER {there.owner}")
    profile(there.owner_url, build("alexnet"), 4, backend="model")
    try:
        yield there
    finally:
        with admin() as conn:
            conn.execute(f"DROP DATABASE {there.database} WITH (FORCE)")
            for name in reversed(there.roles):
                conn.execute(f"DROP ROLE IF EXISTS {name}")


def superuser_dsn(server: Server) -> str:
    from sqlalchemy import make_url

    url = make_url(PG_URL)
    return f"host={url.host} port={url.port or 5432} dbname={server.database} user={make_url_user()}"


def install(server: Server, extension: str) -> None:
    with admin(server.database) as conn:
        conn.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")


# The probe's write: the role becomes the superuser the login is, then dblink deletes every run.
# Both calls sit after "--\r" in LIMIT, where PostgreSQL reads on (a comment ends at \r) and a
# reader of the text that ends comments at \n alone sees none; "\n + 0" keeps the text going.
def the_probes_write(server: Server) -> str:
    return (
        f"SELECT 1 LIMIT 1 --\r + length(set_config('role', '{make_url_user()}', false)) * 0"
        f" + length(dblink_exec('{superuser_dsn(server)}', 'DELETE FROM public.run')) * 0\n + 0"
    )


def assert_one_line_refusal(error: pytest.ExceptionInfo, *fragments: str) -> None:
    message = str(error.value)
    assert message.startswith("refused: ") and "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message


# Finding 1: the login, not the current role


def test_a_superuser_login_that_sets_the_readers_role_is_refused(server):
    """The probe's reproduction: a superuser URL whose options set role=<reader> passed the check,
    then deleted every run. Refused before the statement runs; the runs stay."""
    name = server.reader()
    install(server, "dblink")
    disguised = url_of(make_url_user(), server.database, f"options=-crole%3D{name}")
    with pytest.raises(StoreError) as error:
        run_sql(open_store(server.owner_url, write=False), the_probes_write(server), reader=disguised)
    assert_one_line_refusal(error, "role")
    assert server.runs() == 1


def test_a_superuser_whose_role_setting_switches_it_to_a_reader_is_refused(server):
    """No option in the URL: the superuser's own role setting (ALTER ROLE ... SET role) makes its
    sessions start as the reader. The login is a superuser: refused, and nothing deleted."""
    name = server.reader()
    install(server, "dblink")
    chief = server.role("chief", "LOGIN SUPERUSER")
    with admin() as conn:
        conn.execute(f"GRANT {name} TO {chief}")
        conn.execute(f"ALTER ROLE {chief} SET role = {name}")
    attack = the_probes_write(server).replace(f"'{make_url_user()}'", f"'{chief}'")
    with pytest.raises(StoreError) as error:
        run_sql(open_store(server.owner_url, write=False), attack, reader=url_of(chief, server.database))
    assert_one_line_refusal(error, f"'{chief}' is a superuser")
    assert server.runs() == 1


@pytest.mark.parametrize(
    "grant, why",
    [
        ("GRANT {owner} TO {login}", "writes the store"),  # the owner's role, not inherited by the login
        ("GRANT pg_read_server_files TO {login}", "reaches the server's files"),
    ],
)
def test_every_role_the_login_may_become_is_checked(server, grant, why):
    """A login whose role setting starts its sessions as a harmless role is judged by what the
    login itself may become."""
    harmless = server.role("harmless", "NOLOGIN")
    login = server.role("login", "LOGIN NOINHERIT")
    with admin() as conn:
        conn.execute(f"GRANT {harmless} TO {login}")
        conn.execute(grant.format(owner=server.owner, login=login))
        conn.execute(f"ALTER ROLE {login} SET role = {harmless}")
    with admin(server.database) as conn:
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {harmless}")
    with pytest.raises(StoreError) as error:
        run_sql(
            open_store(server.owner_url, write=False), "SELECT COUNT(*) FROM run", reader=url_of(login, server.database)
        )
    assert_one_line_refusal(error, f"'{login}' {why}")


# Connection options, from the URL or the environment


@pytest.mark.parametrize(
    "options",
    [
        "-crole%3D{reader}",
        "-c%20work_mem%3D1GB",
        "--statement_timeout%3D0",
        "-csearch_path%3Dpublic%20-cgeqo%3Doff",
        "-csession_authorization%3D{reader}",
    ],
)
def test_a_reader_url_whose_options_set_anything_but_the_search_path_is_refused(server, options, runner):
    name = server.reader()
    reader = server.url(name)
    url = f"{reader}?options={options.format(reader=name)}"
    with pytest.raises(StoreError) as error:
        run_sql(open_store(server.owner_url, write=False), "SELECT 1", reader=url)
    assert_one_line_refusal(error, "options")
    result = runner.invoke(cli, ["sql", "SELECT 1", "--db", server.owner_url, "--reader-url", url])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "options" in result.output
    ok = run_sql(
        open_store(server.owner_url, write=False), "SELECT 1", reader=f"{reader}?options=-csearch_path%3Dpublic"
    )
    assert ok == (["?column?"], [(1,)])  # the search path only names where the store is


def test_the_libpq_environment_that_sets_options_is_refused(server, monkeypatch, tmp_path):
    reader = server.url(server.reader())
    store = open_store(server.owner_url, write=False)
    monkeypatch.setenv("PGOPTIONS", "-c work_mem=1GB")
    with pytest.raises(StoreError) as error:
        run_sql(store, "SELECT 1", reader=reader)
    assert_one_line_refusal(error, "PGOPTIONS")
    monkeypatch.delenv("PGOPTIONS")
    services = tmp_path / "pg_service.conf"
    services.write_text(f"[evil]\noptions=-crole={make_url_user()}\n")
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    monkeypatch.setenv("PGSERVICE", "evil")
    with pytest.raises(StoreError) as error:
        run_sql(store, "SELECT 1", reader=reader)
    assert_one_line_refusal(error, "PGSERVICE")
    monkeypatch.delenv("PGSERVICE")
    with pytest.raises(StoreError) as error:
        run_sql(store, "SELECT 1", reader=f"{reader}?service=evil")
    assert_one_line_refusal(error, "service")


def test_a_setting_the_connection_made_some_other_way_is_refused(server, monkeypatch):
    """The check after connecting: a setting the client sent (libpq's PGGEQO here) is refused
    whatever sent it."""
    reader = server.url(server.reader())
    monkeypatch.setenv("PGGEQO", "off")
    with pytest.raises(StoreError) as error:
        run_sql(open_store(server.owner_url, write=False), "SELECT 1", reader=reader)
    assert_one_line_refusal(error, "geqo")


# The session is pinned


def test_a_query_that_changes_its_role_is_refused_before_its_rows(server):
    """A reader that is a member of another reading role: a query that switches to it (hidden from
    the statement check as the probe hid its calls) is refused before any row is returned."""
    name = server.reader()
    reader = server.url(name)
    other = server.role("other", "NOLOGIN")
    with admin() as conn:
        conn.execute(f"GRANT {other} TO {name}")
    with admin(server.database) as conn:
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {other}")
    statement = f"SELECT id FROM run LIMIT 1 --\r + length(set_config('role', '{other}', false)) * 0\n + 0"
    with pytest.raises(StoreError) as error:
        run_sql(open_store(server.owner_url, write=False), statement, reader=reader)
    assert_one_line_refusal(error)


def test_the_pin_refuses_a_session_whose_role_changed(server):
    import psycopg

    from tracker.store.reader import refuse_role_change

    name = server.reader()
    reader = server.url(name)
    other = server.role("other", "NOLOGIN")
    with admin() as conn:
        conn.execute(f"GRANT {other} TO {name}")
    with psycopg.connect(reader.replace("+psycopg", "")) as conn:
        conn.read_only = True
        refuse_role_change(conn.cursor())  # as it logged in: nothing to refuse
        conn.execute(f"SELECT set_config('role', '{other}', false)")
        with pytest.raises(StoreError, match=rf"^refused: .*'{name}' .*'{other}'"):
            refuse_role_change(conn.cursor())


# What tracker reader-role grants


@pytest.mark.parametrize("how", ["apply", "printed"])
def test_the_reader_cannot_read_a_table_a_superuser_makes_later(server, runner, how):
    """The probe's leak: reader-role run as a superuser set default privileges for that superuser,
    so a file_fdw table over /etc/passwd it made later was read through the reader. Default
    privileges are now the store owner's alone: a table the owner adds (an upgrade) is readable,
    the superuser's is not."""
    name = f"{server.database}_reader"
    if how == "apply":
        reader = server.url(server.reader())
    else:  # the README's way: the SQL printed, then run by a superuser
        printed = runner.invoke(cli, ["reader-role", "--db", server.owner_url, "--name", name])
        assert printed.exit_code == 0, printed.output
        server.roles.append(name)
        with admin(server.database) as conn:
            conn.execute(printed.output)
        reader = url_of(name, server.database)
    install(server, "file_fdw")
    with admin(server.database) as conn:
        conn.execute("CREATE SERVER t74_files FOREIGN DATA WRAPPER file_fdw")
        conn.execute(
            "CREATE FOREIGN TABLE public.passwd (line text) SERVER t74_files "
            "OPTIONS (filename '/etc/passwd', format 'text')"
        )
    with admin(server.database) as conn:  # as the owner, the way an upgrade adds a table
        conn.execute(f"SET ROLE {server.owner}")
        conn.execute("CREATE TABLE public.added_later (x int)")
        conn.execute("INSERT INTO public.added_later VALUES (7)")
    store = open_store(server.owner_url, write=False)
    with pytest.raises(StoreError, match="^refused: ") as error:  # by the statement's guard, and by the role:
        run_sql(store, "SELECT line FROM passwd", reader=reader)
    assert "root" not in str(error.value)
    with admin(server.database) as conn:
        granted = "SELECT has_table_privilege(%s, %s, 'SELECT')"
        assert conn.execute(granted, (name, "public.passwd")).fetchone() == (False,)
        assert conn.execute(granted, (name, "public.added_later")).fetchone() == (True,)


def test_the_reader_role_sql_grants_reading_and_bounds_the_server(server, runner):
    from tracker.store.reader import READER_SETTINGS

    name = f"{server.database}_reader"
    printed = runner.invoke(cli, ["reader-role", "--db", server.owner_url, "--name", name]).output
    assert f'ALTER DEFAULT PRIVILEGES FOR ROLE "{server.owner}" IN SCHEMA "public" GRANT SELECT ON TABLES' in printed
    grants = [line for line in printed.splitlines() if line.startswith("GRANT ")]
    assert grants and all(
        line.startswith(("GRANT SELECT ON ", "GRANT USAGE ON SCHEMA ", "GRANT CONNECT ON ")) for line in grants
    )
    for setting in ("statement_timeout", "temp_file_limit", "work_mem", "idle_in_transaction_session_timeout"):
        assert f"ALTER ROLE {name} SET {setting} = '{READER_SETTINGS[setting]}';" in printed
    reader = server.url(server.reader())
    _, rows = run_sql(
        open_store(server.owner_url, write=False),
        "SELECT name, source FROM pg_settings WHERE name = ANY(ARRAY['statement_timeout', "
        "'temp_file_limit', 'work_mem', 'idle_in_transaction_session_timeout']) ORDER BY name",
        reader=reader,
    )
    assert dict(rows)["temp_file_limit"] == "user" and dict(rows)["work_mem"] == "user"


def test_a_sort_that_spills_past_the_readers_temp_file_limit_is_ended(server, monkeypatch):
    """The probe's sorts wrote GBs of temp files: the role's temp_file_limit ends them (made
    small here, to spill it quickly)."""
    import tracker.store.reader as reader_module

    monkeypatch.setitem(reader_module.READER_SETTINGS, "temp_file_limit", "1MB")
    reader = server.url(server.reader())
    with pytest.raises(StoreError, match="temp_file_limit"):
        run_sql(
            open_store(server.owner_url, write=False),
            "SELECT x FROM generate_series(1, 1000000) x ORDER BY random() LIMIT 1",
            reader=reader,
        )


def test_tracker_sql_warns_when_the_reader_lacks_the_settings(server, runner):
    bare = server.role("bare", "LOGIN")
    with admin(server.database) as conn:
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {bare}")
    result = runner.invoke(
        cli,
        [
            "sql",
            "SELECT COUNT(*) AS n FROM run",
            "--db",
            server.owner_url,
            "--reader-url",
            url_of(bare, server.database),
            "--format",
            "csv",
        ],
    )
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    assert (
        len(notes) == 1
        and "idle_in_transaction_session_timeout, statement_timeout, temp_file_limit, work_mem" in notes[0]
        and "tracker reader-role" in notes[0]
    )
    assert result.stdout.splitlines() == ["n", "1"]
    made = runner.invoke(
        cli,
        [
            "sql",
            "SELECT COUNT(*) AS n FROM run",
            "--db",
            server.owner_url,
            "--reader-url",
            server.url(server.reader()),
            "--format",
            "csv",
        ],
    )
    assert made.exit_code == 0 and made.stderr == "" and made.stdout.splitlines() == ["n", "1"]


def test_the_docs_give_the_readers_settings_as_the_code_does():
    """The values are defined once, in tracker.store.reader; docs/store.md states them."""
    from pathlib import Path

    from tracker.store.reader import READER_SETTINGS

    docs = (Path(__file__).parents[1] / "docs" / "store.md").read_text()
    for setting, value in READER_SETTINGS.items():
        assert f"`{setting} = {value}`" in docs
