"""User SQL (``tracker sql``, ``tracker.run_sql``): one query, read-only and bounded, by construction.

A user's statement is hostile input. What it may do is set by how it is run, not by reading it:

- **SQLite**: the store's read-only connection (``query_only``, no ATTACH), the driver's own refusal
  of a second statement, and an authorizer that allows reading and nothing else (no write, PRAGMA
  that sets, transaction or extension). A progress handler stops the query at its time limit or on
  Ctrl-C, which a Python signal handler could not do while SQLite runs.
- **PostgreSQL**: a read-only transaction, and the statement runs as ``DECLARE ... CURSOR FOR``
  through the extended query protocol: the server parses exactly one SELECT, WITH or VALUES query
  (no SET, COPY, DO, CALL, a second statement, or data-modifying WITH). Before any row is fetched,
  the server's own plan (``EXPLAIN VERBOSE``, every view expanded, every name resolved whatever its
  spelling or comments) is read for the functions it calls, and one that reaches files, other
  sessions, the server's settings or SQL inside a string is refused (``OUTSIDE``).
  ``statement_timeout`` bounds every fetch by what is left of the time limit; Ctrl-C and SIGTERM
  cancel the query on the server (psycopg sends the cancel); a killed client is noticed by the
  server within a second (``client_connection_check_interval``, PostgreSQL 14 and later) and
  within the time limit on any version.

Rows stream: a fetch holds ``FETCH_ROWS`` at a time, whatever the query returns.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from itertools import islice
from typing import Any, Callable, Iterator

from tracker.errors import StoreError
from tracker.signals import held, interruptible, pending, raise_for
from tracker.store.db import Store
from tracker.store.queries import _plain as plain

DEFAULT_TIMEOUT_S = 60.0
_ONE_QUERY = " (tracker sql runs one read-only query: SELECT, WITH or VALUES)"
FETCH_ROWS = 1000
_SQLITE_STEPS = 10_000  # SQLite VM instructions between two looks at the clock and the signals

# PostgreSQL functions that act outside the query's read-only transaction, by what they reach.
OUTSIDE = {
    "files on the server": ("pg_read_file", "pg_read_binary_file", "pg_ls_*", "pg_stat_file", "pg_file_*",
                            "pg_logdir_ls", "pg_current_logfile", "lo_*", "loread", "lowrite"),
    "other sessions": ("pg_terminate_backend", "pg_cancel_backend", "pg_signal_backend", "pg_notify",
                       "pg_advisory_*", "pg_try_advisory_*", "dblink*"),
    "the server": ("set_config", "pg_reload_conf", "pg_rotate_logfile", "pg_promote", "pg_switch_wal",
                   "pg_create_restore_point", "pg_backup_*", "pg_start_backup", "pg_stop_backup",
                   "pg_wal_replay_*", "pg_log_backend_memory_contexts", "pg_stat_reset*", "pg_*replication_slot*",
                   "pg_replication_origin_*", "pg_logical_*", "pg_import_system_collations"),
    "SQL inside a string, which no plan shows": ("*_to_xml*", "ts_stat"),
}
SQLITE_READS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
SQLITE_READ_PRAGMAS = {"table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
                       "foreign_key_list", "collation_list", "function_list", "module_list", "pragma_list",
                       "compile_options"}
SQLITE_REFUSED_FUNCTIONS = {"load_extension", "fts3_tokenizer"}


@dataclass
class Answer:
    """An open query: its columns, then its rows as they are fetched (values made plain: JSON text
    as lists, datetimes as ISO strings), and anything the user should know (``notes``)."""
    columns: list[str]
    rows: Iterator[tuple]
    notes: list[str] = field(default_factory=list)


def run_sql(store: Store, statement: str, *, timeout_s: float | None = None,
            limit: int | None = None) -> tuple[list[str], list[tuple]]:
    """(column names, rows) of one read-only query; at most ``limit`` rows."""
    with query(store, statement, timeout_s=timeout_s) as answer:
        return answer.columns, list(islice(answer.rows, limit))


@contextmanager
def query(store: Store, statement: str, *, timeout_s: float | None = None) -> Iterator[Answer]:
    """Run one read-only query on ``store`` (module docstring): an ``Answer`` whose rows stream
    while the block lasts. A statement that could write, in the database or beside it, is refused
    in one line, as is one that runs past ``timeout_s`` seconds (None: ``DEFAULT_TIMEOUT_S``)."""
    timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
    if not timeout_s > 0:
        raise StoreError(f"the time limit must be a positive number of seconds, not {timeout_s}")
    if not statement.strip():
        raise StoreError("refused: tracker sql is read-only and runs one query, and this statement is empty")
    connection = store.engine.raw_connection()
    driver: Any = connection.driver_connection  # sqlite3's or psycopg's own connection
    try:
        run = _sqlite if store.engine.dialect.name == "sqlite" else _postgresql
        with run(driver, statement, timeout_s) as answer:
            yield answer
    finally:
        connection.invalidate()  # never back to a pool: its session may hold the query's settings


# SQLite

@contextmanager
def _sqlite(conn: sqlite3.Connection, statement: str, timeout_s: float) -> Iterator[Answer]:
    deadline = time.monotonic() + timeout_s
    refused: list[str] = []
    conn.set_authorizer(lambda *args: _authorize(refused, *args))
    conn.set_progress_handler(lambda: int(pending() is not None or time.monotonic() > deadline), _SQLITE_STEPS)
    # A signal is only noted (held): the progress handler then stops the query, and we raise it.
    with held(), _sqlite_errors(refused, timeout_s):
        cursor = conn.cursor()
        cursor.execute(statement)
        if cursor.description is None:  # nothing ran: a comment, or a PRAGMA that returns nothing
            raise StoreError("refused: tracker sql is read-only and runs one query, and this statement holds none")
        columns = [d[0] for d in cursor.description]
        yield Answer(columns, _stream(lambda: cursor.fetchmany(FETCH_ROWS)))


def _authorize(refused: list[str], action: int, first: str | None, second: str | None, *_) -> int:
    """Reading, and nothing else; the first thing refused is noted for the message."""
    if action in SQLITE_READS and not (action == sqlite3.SQLITE_FUNCTION and second
                                       and second.lower() in SQLITE_REFUSED_FUNCTIONS):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and (first or "").lower() in SQLITE_READ_PRAGMAS:
        return sqlite3.SQLITE_OK
    refused.append(f"{second}()" if action == sqlite3.SQLITE_FUNCTION else
                   f"PRAGMA {first}" if action == sqlite3.SQLITE_PRAGMA else _SQLITE_ACTIONS.get(action, "this"))
    return sqlite3.SQLITE_DENY


_SQLITE_ACTIONS = {getattr(sqlite3, f"SQLITE_{name}"): name.replace("_", " ") for name in (
    "CREATE_INDEX", "CREATE_TABLE", "CREATE_TEMP_INDEX", "CREATE_TEMP_TABLE", "CREATE_TEMP_TRIGGER",
    "CREATE_TEMP_VIEW", "CREATE_TRIGGER", "CREATE_VIEW", "DELETE", "DROP_INDEX", "DROP_TABLE",
    "DROP_TEMP_INDEX", "DROP_TEMP_TABLE", "DROP_TEMP_TRIGGER", "DROP_TEMP_VIEW", "DROP_TRIGGER", "DROP_VIEW",
    "INSERT", "TRANSACTION", "UPDATE", "ATTACH", "DETACH", "ALTER_TABLE", "REINDEX", "ANALYZE",
    "CREATE_VTABLE", "DROP_VTABLE", "SAVEPOINT")}


@contextmanager
def _sqlite_errors(refused: list[str], timeout_s: float) -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        signum = pending()
        if signum is not None:
            raise_for(signum)
        message = _first_line(exc)
        if message == "interrupted":
            raise StoreError(_past_limit(timeout_s)) from None
        if refused:
            raise StoreError(f"refused: tracker sql is read-only and runs queries, not {refused[0]}") from None
        if "one statement at a time" in message:
            raise StoreError("refused: tracker sql is read-only and runs one statement at a time") from None
        if "readonly" in message or "read-only" in message:
            raise StoreError(f"refused: tracker sql is read-only ({message})") from None
        raise StoreError(f"SQL error: {message}{_ONE_QUERY if 'syntax error' in message else ''}") from None


# PostgreSQL

@contextmanager
def _postgresql(conn: Any, statement: str, timeout_s: float) -> Iterator[Answer]:
    import psycopg

    deadline = time.monotonic() + timeout_s
    conn.rollback()
    conn.read_only = True
    with interruptible(), _postgresql_errors(psycopg, timeout_s):
        with conn.cursor() as setup:
            _limit_time(setup, deadline, timeout_s)
            if conn.info.server_version >= 140000:  # the server checks that the client is still there
                setup.execute("SET LOCAL client_connection_check_interval = 1000")
            superuser = setup.execute("SELECT current_setting('is_superuser')").fetchone()[0] == "on"
        cursor = conn.cursor(name="tracker_sql")  # DECLARE tracker_sql CURSOR FOR <statement>, one query
        cursor.execute(statement)
        _refuse_outside(conn, statement)
        columns = [d.name for d in cursor.description or ()]
        notes = [f"connected as the superuser '{conn.info.user}': tracker sql refuses writes and functions that "
                 "act outside the database, but a role that can only read is the real guard "
                 "(GRANT pg_read_all_data TO a role without other rights)"] if superuser else []

        def fetch() -> list[tuple]:
            with conn.cursor() as setup:
                _limit_time(setup, deadline, timeout_s)
            return cursor.fetchmany(FETCH_ROWS)

        yield Answer(columns, _stream(fetch), notes)


def _limit_time(cursor: Any, deadline: float, timeout_s: float) -> None:
    """The server ends the next statement when the query's time is up."""
    left_ms = int((deadline - time.monotonic()) * 1000)
    if left_ms < 1:
        raise StoreError(_past_limit(timeout_s))
    cursor.execute(f"SET LOCAL statement_timeout = {left_ms}")
    cursor.execute(f"SET LOCAL idle_in_transaction_session_timeout = {left_ms}")


def _refuse_outside(conn: Any, statement: str) -> None:
    """Refuse the query if its plan calls a function of ``OUTSIDE``. EXPLAIN goes through the
    extended protocol too (binary results), so it is one statement as well, and runs nothing."""
    with conn.cursor(binary=True) as cursor:
        plan = cursor.execute(f"EXPLAIN (VERBOSE, FORMAT JSON) {statement}").fetchone()[0]
    for name in sorted(called(plan)):
        for reach, patterns in OUTSIDE.items():
            if any(fnmatchcase(name, pattern) for pattern in patterns):
                raise StoreError(f"refused: tracker sql is read-only, and {name}() reaches {reach}")


_CALL = re.compile(r'("(?:[^"]|"")+"|[A-Za-z_][\w$]*)\s*\(')
_LITERAL = re.compile(r"'(?:[^']|'')*'")


def called(plan: Any) -> set[str]:
    """Every function a PostgreSQL plan (EXPLAIN VERBOSE, JSON) calls, as the server spelled it."""
    if isinstance(plan, str):  # some drivers hand json back as text
        plan = json.loads(plan)
    names: set[str] = set()
    stack = [plan]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("Function Name"), str):
                names.add(node["Function Name"].lower())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            names.update(name.strip('"').replace('""', '"').lower()
                         for name in _CALL.findall(_LITERAL.sub("''", node)))
    return names


@contextmanager
def _postgresql_errors(psycopg: Any, timeout_s: float) -> Iterator[None]:
    try:
        yield
    except psycopg.Error as exc:
        message = _first_line(exc)
        state = getattr(exc, "sqlstate", None) or ""
        if state == "57014":  # query_canceled: by the time limit (a Ctrl-C is raised as itself)
            raise StoreError(_past_limit(timeout_s)) from None
        if "multiple commands" in message:
            raise StoreError("refused: tracker sql is read-only and runs one statement at a time") from None
        if state in ("25006", "42501", "0A000"):  # read-only transaction, privilege, DECLARE's own refusals
            raise StoreError(f"refused: tracker sql is read-only ({message})") from None
        if state == "42601":  # a syntax error: DECLARE ... FOR takes a query and nothing else
            raise StoreError(f"SQL error: {message}{_ONE_QUERY}") from None
        raise StoreError(f"SQL error: {message}") from None


# Both

def _stream(fetch: Callable[[], list[tuple]]) -> Iterator[tuple]:
    """Rows, ``FETCH_ROWS`` at a time; a signal that came meanwhile is raised between fetches."""
    while True:
        rows = fetch()
        for row in rows:
            yield tuple(plain(value) for value in row)
        signum = pending()
        if signum is not None:
            raise_for(signum)
        if len(rows) < FETCH_ROWS:
            return


def _past_limit(timeout_s: float) -> str:
    return f"the query ran past its time limit of {timeout_s:g} s (--timeout)"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
