"""User SQL (``tracker sql``, ``tracker.run_sql``): one query, read-only and bounded, by construction.

A user's statement is hostile input. What it may do is set by how it is run, and on PostgreSQL also
by the server's own parser's reading of it, never by a reading of tracker's own:

- **SQLite**: the store's read-only connection (``query_only``, no ATTACH), the driver's own refusal
  of a second statement, and an authorizer that allows reading and nothing else (no write, PRAGMA
  that sets, transaction or extension). No value may exceed ``SQLITE_MAX_LENGTH``. The statement
  runs in a thread of its own while the caller's waits for its rows: the time limit, Ctrl-C and
  SIGTERM end the wait even inside one long C call of SQLite's, and then interrupt the query.
  SQLite's memory in the process is capped (``SQLITE_HEAP_BYTES``), and a row over ``FETCH_BYTES``
  is refused.
- **PostgreSQL**: the statement runs only as a role that can only read (``tracker.store.reader``:
  judged by its login, never a superuser, a member of a role that reaches the server's files,
  programs or other sessions, nor the role that writes the store; ``--reader-url`` or
  $TRACKER_READER_URL names such a role), on a connection that sets no role or setting, and
  whose role is checked again after each fetch.
  It is read first by PostgreSQL's own parser (pglast, libpg_query): exactly one SELECT, WITH or
  VALUES query, with no writing WITH query, SELECT INTO or FOR UPDATE/SHARE. Every name in the
  whole tree that may run code (a function, in any clause, LIMIT and OFFSET included; a name
  after a dot, which may call a function on a row; an operator; a type; a relation) is looked up
  in the catalog and refused unless it is PostgreSQL's own (``pg_catalog``, from no extension) and
  none of ``OUTSIDE``, or a relation of the store's or the system catalogs', before anything is
  planned: the planner runs IMMUTABLE functions when it folds constants. The server is then given
  the parse tree written back, so it reads what was checked. The server's own plan
  (``EXPLAIN (VERBOSE, FORMAT JSON)``, every view expanded) is read as a second guard, and one
  over ``PLAN_BYTES`` (a constant the planner folded, such as ``repeat('x', 1000000000)``) is
  refused unread. Only then is the query declared, in a read-only transaction, as
  ``DECLARE ... CURSOR FOR``. It waits at most ``LOCK_WAIT_MS`` for a lock, and can take none of
  its own (advisory locks are in ``OUTSIDE``), so it never holds up ``tracker experiment``.
  The query runs wrapped (``_BOUNDED``) so that the server refuses rows too large to fetch: any
  ``FETCH_ROWS`` consecutive rows (a fetch) may hold ``FETCH_BYTES``, counted as text (the form
  the client receives), so a value built on the server, such as ``repeat('x', (1e9 + random())::int)``,
  never reaches the client's memory.
  ``statement_timeout`` bounds every fetch by what is left of the time limit, and at the limit
  the client cancels the query and, ``CANCEL_GRACE_S`` later, leaves the connection; Ctrl-C and
  SIGTERM cancel the query on the server (psycopg sends the cancel); a killed client is noticed by the
  server within a second (``client_connection_check_interval``, PostgreSQL 14 and later) and
  within the time limit on any version.

Rows stream: a fetch holds ``FETCH_ROWS`` at a time, whatever the query returns, and about
``FETCH_BYTES`` at most (on SQLite a batch ends early there; on PostgreSQL the server refuses more).
"""

from __future__ import annotations

import json
import numbers
import os
import queue
import re
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from itertools import islice
from typing import Any, Callable, Iterator

from tracker.errors import StoreError, first_line, shorten
from tracker.signals import interruptible, pending, raise_for
from tracker.store.db import Store
from tracker.store.queries import _plain as plain

DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 86_400.0  # a day: a longer limit is a typo (PostgreSQL's statement_timeout holds 24 days)
MAX_ROWS = 10**12  # a row limit beyond any store's rows (islice takes up to sys.maxsize)
_ONE_QUERY = " (tracker sql runs one read-only query: SELECT, WITH or VALUES)"
_ONE_STATEMENT = "refused: tracker sql is read-only and runs one statement at a time"
FETCH_ROWS = 1000
CANCEL_GRACE_S = 0.5  # how long past the time limit PostgreSQL is given to answer its cancel before the client leaves
_SQLITE_STEPS = 10_000  # SQLite VM instructions between two looks at whether the query was stopped

# PostgreSQL functions that act outside the query's read-only transaction, by what they reach.
OUTSIDE = {
    "files on the server": ("pg_read_file", "pg_read_binary_file", "pg_ls_*", "pg_stat_file", "pg_file_*",
                            "pg_logdir_ls", "pg_current_logfile", "lo_*", "loread", "lowrite",
                            "pg_hba_file_rules", "pg_ident_file_mappings", "pg_show_all_file_settings", "pg_config"),
    "indexes, which it writes": ("brin_summarize_*", "brin_desummarize_range", "gin_clean_pending_list"),
    "other sessions": ("pg_terminate_backend", "pg_cancel_backend", "pg_signal_backend", "pg_notify",
                       "pg_advisory_*", "pg_try_advisory_*", "dblink*"),
    "the server": ("set_config", "pg_reload_conf", "pg_rotate_logfile", "pg_promote", "pg_switch_wal",
                   "pg_create_restore_point", "pg_backup_*", "pg_start_backup", "pg_stop_backup",
                   "pg_wal_replay_*", "pg_log_backend_memory_contexts", "pg_stat_reset*", "pg_*replication_slot*",
                   "pg_replication_origin_*", "pg_logical_*", "pg_import_system_collations",
                   "txid_current", "pg_current_xact_id"),  # these two assign a transaction id: a write
    "SQL inside a string, which no plan shows": ("*_to_xml*", "ts_stat", "ts_rewrite", "crosstab*",
                                                 "xpath_table", "connectby"),
}
PLAN_BYTES = 1 << 20  # a longer plan is refused unread: only a folded constant makes one this long
LOCK_WAIT_MS = 1000  # the longest a query waits for a lock (of a table being upgraded) before it is refused
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


def run_sql(store: Store, statement: str, *, timeout_s: float | None = None, limit: int | None = None,
            reader: str | None = None) -> tuple[list[str], list[tuple]]:
    """(column names, rows) of one read-only query; at most ``limit`` rows."""
    limit = row_limit(limit)
    with query(store, statement, timeout_s=timeout_s, reader=reader) as answer:
        return answer.columns, list(islice(answer.rows, limit))


@contextmanager
def query(store: Store, statement: str, *, timeout_s: float | None = None,
          reader: str | None = None) -> Iterator[Answer]:
    """Run one read-only query on ``store`` (module docstring): an ``Answer`` whose rows stream
    while the block lasts. A statement that could write, in the database or beside it, is refused
    in one line, as is one that runs past ``timeout_s`` seconds (None: ``DEFAULT_TIMEOUT_S``).
    On PostgreSQL it runs through ``reader``, a URL of the same store as a role that can only read
    (None: $TRACKER_READER_URL, else the store's own connection, refused unless it can only read)."""
    timeout_s = time_limit(timeout_s)
    if not statement.strip():
        raise StoreError("refused: tracker sql is read-only and runs one query, and this statement is empty")
    if reader and store.dialect == "sqlite":
        raise StoreError("a reader connection is for a PostgreSQL store: tracker sql reads a SQLite file "
                         "through a read-only connection already (leave out --reader-url)")
    if store.sqlite_connect is not None:  # on a connection of its own, in a thread of its own
        with _sqlite(store.sqlite_connect, statement, timeout_s) as answer:
            yield answer
        return
    store = _reader_store(store, reader)
    connection = store.engine.raw_connection()
    driver: Any = connection.driver_connection  # psycopg's own connection
    try:
        with _postgresql(driver, statement, timeout_s) as answer:
            yield answer
    finally:
        connection.invalidate()  # never back to a pool: its session may hold the query's settings


def time_limit(timeout_s: float | None) -> float:
    """``timeout_s`` checked where it enters (None: ``DEFAULT_TIMEOUT_S``): seconds, finite, above 0."""
    if timeout_s is None:
        return DEFAULT_TIMEOUT_S
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real) or not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise StoreError(f"the time limit must be a positive number of seconds, at most {MAX_TIMEOUT_S:g}, "
                         f"not {_shown(timeout_s)}")
    return float(timeout_s)


def row_limit(limit: int | None) -> int | None:
    """``limit`` checked where it enters (None: no limit): a whole number of rows, at least 1."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, numbers.Integral)
                              or not 1 <= limit <= MAX_ROWS):
        raise StoreError(f"the row limit must be a whole number from 1 to {MAX_ROWS}, not {_shown(limit)}")
    return None if limit is None else int(limit)


def _shown(value: object) -> str:
    try:
        return shorten(str(value))
    except ValueError:  # Python writes no int of over 4,300 digits
        return "a number that long"


# SQLite

# The longest string, blob or row a query may build, in bytes. SQLite's own limit is 1 GB, and a
# single function call (printf('%.*c', 100000000, 'a')) builds such a value inside one C call that
# no time limit or signal reaches, in this process's memory. A trace store's values are kilobytes.
SQLITE_MAX_LENGTH = 16 << 20
# The most memory SQLite may hold in this process (``PRAGMA hard_heap_limit``, which is one limit
# for the whole process, kept once set). A row's values are all held at once before it is handed
# over (Python then copies them), and constants are built before the first row: 40 columns of
# 16 MiB would be 640 MiB. Four values at the longest fit; a store's queries need a few MiB.
SQLITE_HEAP_BYTES = 64 << 20
FETCH_BYTES = 16 << 20  # a fetch holds about this many bytes at most: SQLite ends its batch, PostgreSQL refuses more
_SQLITE_GRACE_S = 0.5  # how long an ended query's thread is waited for, so that it closes its connection
_END = "end of rows"  # what the query's thread hands over after its last row


@contextmanager
def _sqlite(connect: Callable[[], sqlite3.Connection], statement: str, timeout_s: float) -> Iterator[Answer]:
    """The statement runs in a thread of its own (``_SqliteQuery``) while this one waits for its
    rows: the time limit, Ctrl-C and SIGTERM end the wait even while SQLite is inside one long C
    call (a function on a long string), which neither its progress handler nor a Python signal
    handler reaches. The query is then interrupted, and its thread left to end by itself."""
    deadline = time.monotonic() + timeout_s
    worker = _SqliteQuery(connect, statement)
    with interruptible(), _sqlite_errors(worker.refused, timeout_s):
        try:
            worker.start()
            columns = worker.take(deadline, timeout_s)
            if columns is None:  # nothing ran: a comment, or a PRAGMA that returns nothing
                raise StoreError("refused: tracker sql is read-only and runs one query, and this statement holds none")
            yield Answer(columns, worker.rows(deadline, timeout_s))
        finally:
            worker.stop()


class _SqliteQuery(threading.Thread):
    """One statement on a connection of its own (a sqlite3 connection serves only the thread that
    opened it): its column names (None if it returns nothing), then its rows in batches, at most
    one waiting to be taken, or the error that ended it."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], statement: str) -> None:
        super().__init__(name="tracker sql", daemon=True)  # daemon: a C call still running never holds up exit
        self.connect, self.statement = connect, statement
        self.refused: list[str] = []
        self.stopped = threading.Event()
        self.handed: queue.Queue = queue.Queue(maxsize=1)
        self.conn: sqlite3.Connection | None = None
        self.closing = threading.Lock()  # interrupt() never meets a connection being closed

    def run(self) -> None:
        conn = None
        try:
            self.conn = conn = self.connect()
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, SQLITE_MAX_LENGTH)
            conn.execute(f"PRAGMA hard_heap_limit = {SQLITE_HEAP_BYTES}")  # only ever lowers it
            conn.set_authorizer(lambda *args: _authorize(self.refused, *args))
            conn.set_progress_handler(self.stopped.is_set, _SQLITE_STEPS)  # an interrupt() that came too early
            try:
                cursor = conn.execute(self.statement)
            except sqlite3.Error:
                _name_refusal(conn, self.statement, self.refused)
                raise
            if self._hand(None if cursor.description is None else [d[0] for d in cursor.description]):
                while (batch := _batch(cursor)) and self._hand(batch):
                    pass
                self._hand(_END)
        except Exception as exc:  # raised in the caller's thread, where the rows are taken
            self._hand(exc)
        finally:
            with self.closing:
                self.conn = None
                if conn is not None:
                    conn.close()

    def _hand(self, item: Any) -> bool:
        """Hand ``item`` over once the one before it is taken; False if the query was stopped."""
        while not self.stopped.is_set():
            try:
                self.handed.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def take(self, deadline: float, timeout_s: float) -> Any:
        """The next thing handed over, or the error it is; past the deadline, the time limit's."""
        try:
            item = self.handed.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise StoreError(_past_limit(timeout_s)) from None
        if isinstance(item, BaseException):
            raise item
        if item is not _END and time.monotonic() > deadline:
            raise StoreError(_past_limit(timeout_s))
        return item

    def rows(self, deadline: float, timeout_s: float) -> Iterator[tuple]:
        while (batch := self.take(deadline, timeout_s)) is not _END:
            for row in batch:
                yield tuple(plain(value) for value in row)

    def stop(self) -> None:
        """End the query: at once between two SQLite steps, else when its C call returns."""
        self.stopped.set()
        with self.closing:
            if self.conn is not None:
                self.conn.interrupt()  # the one sqlite3 call another thread may make
        if self.is_alive():
            self.join(_SQLITE_GRACE_S)


def _batch(cursor: sqlite3.Cursor) -> list[tuple]:
    """The next rows: ``FETCH_ROWS`` of them, fewer once they hold ``FETCH_BYTES``; a row over
    ``FETCH_BYTES`` is refused (SQLite's heap limit keeps it far below the client's memory)."""
    rows: list[tuple] = []
    size = 0
    for row in cursor:
        rows.append(row)
        row_size = 0
        for value in row:  # a loop, not sum(): this runs for every value of every row
            if isinstance(value, (str, bytes)):
                row_size += len(value)
        if row_size > FETCH_BYTES:
            raise StoreError(f"refused: a row of the query holds {row_size:,} bytes, over the {FETCH_BYTES >> 20} MiB "
                             "tracker sql fetches at a time: select fewer or shorter values (substr, length)")
        size += row_size
        if len(rows) == FETCH_ROWS or size >= FETCH_BYTES:
            break
    return rows


def _authorize(refused: list[str], action: int, first: str | None, second: str | None, *_) -> int:
    """Reading, and nothing else; what is refused is noted for the message."""
    if action in SQLITE_READS and not (action == sqlite3.SQLITE_FUNCTION and second
                                       and second.lower() in SQLITE_REFUSED_FUNCTIONS):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and (first or "").lower() in SQLITE_READ_PRAGMAS:
        return sqlite3.SQLITE_OK
    refused.append(_refusal(action, first, second))
    return sqlite3.SQLITE_DENY


def _refusal(action: int, first: str | None, second: str | None) -> str:
    """What the authorizer refused, as the message names it."""
    if action == sqlite3.SQLITE_FUNCTION:
        return f"{second}()"
    if action == sqlite3.SQLITE_PRAGMA:
        return f"PRAGMA {first}" + ("" if second is None else f" = {shorten(second)}")
    return _SQLITE_ACTIONS.get(action, f"SQLite action {action}")


_SQLITE_ACTIONS = {getattr(sqlite3, f"SQLITE_{name}"): name.replace("_", " ") for name in (
    "CREATE_INDEX", "CREATE_TABLE", "CREATE_TEMP_INDEX", "CREATE_TEMP_TABLE", "CREATE_TEMP_TRIGGER",
    "CREATE_TEMP_VIEW", "CREATE_TRIGGER", "CREATE_VIEW", "DELETE", "DROP_INDEX", "DROP_TABLE",
    "DROP_TEMP_INDEX", "DROP_TEMP_TABLE", "DROP_TEMP_TRIGGER", "DROP_TEMP_VIEW", "DROP_TRIGGER", "DROP_VIEW",
    "INSERT", "TRANSACTION", "UPDATE", "ATTACH", "DETACH", "ALTER_TABLE", "REINDEX", "ANALYZE",
    "CREATE_VTABLE", "DROP_VTABLE", "SAVEPOINT")}


def _name_refusal(conn: sqlite3.Connection, statement: str, refused: list[str]) -> None:
    """Put the statement's own action first in ``refused``. SQLite asks about writing its own
    tables before the action itself (DROP TABLE: DELETE on sqlite_master; ANALYZE: CREATE TABLE
    sqlite_stat1), and about VACUUM's ATTACH only while VACUUM runs. So the statement is prepared
    again as an EXPLAIN, which runs nothing, with those writes allowed: its first refusal is the
    action; none, where the first time it was refused while running, means VACUUM."""
    if not refused:
        return
    own: list[str] = []

    def authorize(action: int, first: str | None, second: str | None, *rest: Any) -> int:
        if action in _OWN_WRITES and (first or "").lower().startswith("sqlite_"):
            return sqlite3.SQLITE_OK
        return _authorize(own, action, first, second, *rest)

    conn.set_authorizer(authorize)
    try:
        conn.execute(f"EXPLAIN {statement}").close()
    except sqlite3.Error:
        pass
    else:
        if not own and refused[0] == "ATTACH":
            own.append("VACUUM")
    refused[:0] = own[:1]


_OWN_WRITES = {sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE, sqlite3.SQLITE_CREATE_TABLE}


@contextmanager
def _sqlite_errors(refused: list[str], timeout_s: float) -> Iterator[None]:
    try:
        yield
    except MemoryError:  # SQLite's heap limit, met while a value was handed to Python
        raise StoreError(_out_of_heap()) from None
    except sqlite3.Error as exc:
        message = first_line(exc)
        code = getattr(exc, "sqlite_errorcode", None)
        if code == sqlite3.SQLITE_INTERRUPT:
            raise StoreError(_past_limit(timeout_s)) from None
        if code == sqlite3.SQLITE_NOMEM:
            raise StoreError(_out_of_heap()) from None
        if code == sqlite3.SQLITE_TOOBIG:
            raise StoreError(f"refused: the query builds a value over {SQLITE_MAX_LENGTH >> 20} MiB, tracker sql's "
                             "limit on one value on SQLite (tracker.store.sql.SQLITE_MAX_LENGTH)") from None
        if refused:
            raise StoreError(f"refused: tracker sql is read-only and runs queries, not {refused[0]}") from None
        if "one statement at a time" in message:
            raise StoreError(_ONE_STATEMENT) from None
        if "readonly" in message or "read-only" in message:
            raise StoreError(f"refused: tracker sql is read-only ({message})") from None
        raise StoreError(f"SQL error: {message}{_ONE_QUERY if 'syntax error' in message else ''}") from None


def _out_of_heap() -> str:
    return (f"refused: the query holds over {SQLITE_HEAP_BYTES >> 20} MiB at once, tracker sql's limit on "
            "SQLite's memory (tracker.store.sql.SQLITE_HEAP_BYTES): select fewer or shorter values")


# PostgreSQL

def _reader_store(store: Store, reader: str | None) -> Store:
    """The store as the reader connection reaches it (``tracker.store.reader``), checked to be the
    same tables; without a reader, the store itself (whose role ``_postgresql`` then checks)."""
    from tracker.store.db import open_store
    from tracker.store.reader import reader_url, refuse_connection_settings

    url = reader_url(reader)
    if url is None:
        refuse_connection_settings(store.engine.url)
        return store
    reading = open_store(url, write=False)  # validated as --db is, and checked to be tracker's, current
    where = "SELECT current_database(), to_regclass('run')::oid"
    try:
        refuse_connection_settings(reading.engine.url)
        with store.engine.connect() as a, reading.engine.connect() as b:
            if a.exec_driver_sql(where).one() != b.exec_driver_sql(where).one():
                raise StoreError(f"the reader connection {reading.where} reaches other tables than {store.where}: "
                                 "give it the same database and search_path")
    except StoreError:
        reading.dispose()
        raise
    return reading


@contextmanager
def _postgresql(conn: Any, statement: str, timeout_s: float) -> Iterator[Answer]:
    import psycopg

    from tracker.store.reader import refuse_privileged, refuse_role_change, unbounded

    deadline = time.monotonic() + timeout_s
    conn.rollback()
    conn.read_only = True
    _json_as_text(conn)
    with _cancelled_at(conn, deadline, timeout_s), interruptible(), _postgresql_errors(psycopg, timeout_s):
        with conn.cursor() as setup:
            _limit_time(setup, deadline, timeout_s)
            if conn.info.server_version >= 140000:  # the server checks that the client is still there
                setup.execute("SET LOCAL client_connection_check_interval = 1000")
            setup.execute(f"SET LOCAL lock_timeout = {LOCK_WAIT_MS}")
            refuse_privileged(setup)
            notes = [note] if (note := unbounded(setup)) else []
            query = read_query(statement)
            _refuse_names(setup, query)  # from the catalog, before anything is planned
        bounded = _BOUNDED.format(query=query.text)
        _refuse_outside(conn, bounded)
        cursor = conn.cursor(name="tracker_sql")  # DECLARE tracker_sql CURSOR FOR <query>, one query
        cursor.execute(bounded)
        columns = [d.name for d in cursor.description or ()][:-1]  # the last is _BOUNDED's byte count

        def fetch() -> list[tuple]:
            with conn.cursor() as setup:
                _limit_time(setup, deadline, timeout_s)
            rows = cursor.fetchmany(FETCH_ROWS)
            with conn.cursor() as pin:  # before any row is handed on: the query left the role as it was
                refuse_role_change(pin)
            return [row[:-1] for row in rows]

        yield Answer(columns, _stream(fetch), notes)


def _json_as_text(conn: Any) -> None:
    """json and jsonb come as their text, which ``plain`` decodes as it does SQLite's, only while it is
    short: psycopg's own loader would decode any length, taking about 20 times it in memory."""
    from psycopg.types.string import TextLoader

    for name in ("json", "jsonb"):
        conn.adapters.register_loader(name, TextLoader)


# The user's query inside two of ours: the middle adds, per row, the bytes of the last FETCH_ROWS
# rows as text, the form the client receives them in (not pg_column_size, the stored size, which
# a compressed value or a compact binary form understates), in a sliding window, in the query's
# own order (no PARTITION or ORDER BY, so no sort), so one row is held to FETCH_BYTES too; the
# outer ends the query with an error naming that count when it passes FETCH_BYTES. The cast of
# a row-dependent string is how plain SQL raises an error of its own; CASE evaluates it only then.
_OVER = "tracker_sql_over_"
_BOUNDED = f"""SELECT tracker_sql_q.* FROM (
SELECT tracker_sql_r.*, sum(octet_length(CAST(tracker_sql_r.* AS text)))
    OVER (ROWS BETWEEN {FETCH_ROWS - 1} PRECEDING AND CURRENT ROW) AS tracker_sql_bytes FROM (
{{query}}
) tracker_sql_r) tracker_sql_q
WHERE CASE WHEN tracker_sql_q.tracker_sql_bytes > {FETCH_BYTES}
    THEN ('{_OVER}' || tracker_sql_q.tracker_sql_bytes)::int = 0 ELSE true END"""


@contextmanager
def _cancelled_at(conn: Any, deadline: float, timeout_s: float) -> Iterator[None]:
    """The time limit kept by the client as well as by the server's ``statement_timeout``: the
    server checks its timer only between steps of its work, and some steps (planning a constant
    folded from ``repeat('x', 1000000000)``, writing its plan) take many seconds without one. At
    the deadline a thread of this process cancels the query; ``CANCEL_GRACE_S`` later, if the
    server has not answered, it shuts the connection's socket, which ends the wait here."""
    import socket

    ended = threading.Event()
    closing = threading.Lock()  # the socket is never shut once the connection may be closed

    def watch() -> None:
        if ended.wait(max(0.0, deadline - time.monotonic())):
            return
        try:
            getattr(conn, "cancel_safe", conn.cancel)()
        except Exception:  # the server unreachable, or the connection closed meanwhile: the socket is shut below
            pass
        if not ended.wait(CANCEL_GRACE_S):
            with closing:
                if not ended.is_set():
                    with socket.socket(fileno=os.dup(conn.fileno())) as sock:
                        sock.shutdown(socket.SHUT_RDWR)

    watcher = threading.Thread(target=watch, name="tracker sql deadline", daemon=True)
    watcher.start()
    try:
        yield
    except StoreError:
        if time.monotonic() >= deadline:  # whatever the cancel or the shut socket made of the query
            raise StoreError(_past_limit(timeout_s)) from None
        raise
    finally:
        with closing:
            ended.set()


def _limit_time(cursor: Any, deadline: float, timeout_s: float) -> None:
    """The server ends the next statement when the query's time is up."""
    left_ms = int((deadline - time.monotonic()) * 1000)
    if left_ms < 1:
        raise StoreError(_past_limit(timeout_s))
    cursor.execute(f"SET LOCAL statement_timeout = {left_ms}")
    cursor.execute(f"SET LOCAL idle_in_transaction_session_timeout = {left_ms}")


# A PostgreSQL statement as the server's own parser reads it (pglast: libpg_query), before the
# server sees it. Every name in it that can run code when the query is planned or run is then
# looked up in the catalog (_refuse_names) before any EXPLAIN or DECLARE.

Name = tuple[str | None, str]  # (schema, name): the schema where the statement gives one


@dataclass(frozen=True)
class Query:
    """One read-only query: ``text``, what the server is given, is the parse tree written back by
    pglast and checked to parse to the same tree, so the server reads what was checked (no
    comment, dollar quote or escape of the user's that a lexer could read otherwise); then what
    it names: functions called, names after a dot that may call a function on a row (``r.f`` is
    ``f(r)`` where ``r`` has no column ``f``), operators, types, relations and its WITH queries."""
    text: str
    functions: frozenset[Name]
    members: frozenset[str]
    operators: frozenset[Name]
    types: frozenset[Name]
    relations: frozenset[Name]
    ctes: frozenset[str]


# The operators a query uses without writing them: IN, BETWEEN, CASE x WHEN, NULLIF, IS DISTINCT
# FROM, JOIN ... USING and NATURAL JOIN look up =, <>, < and the rest by name, as written ones are.
IMPLICIT_OPERATORS = ("=", "<>", "<", ">", "<=", ">=")
# Statements that write, wherever they stand in the tree (a WITH query may be one).
_WRITING = {"InsertStmt": "INSERT", "UpdateStmt": "UPDATE", "DeleteStmt": "DELETE", "MergeStmt": "MERGE"}


def read_query(statement: str) -> Query:
    """``statement`` read by PostgreSQL's parser: exactly one SELECT, WITH or VALUES query that
    neither writes nor locks, else refused in one line."""
    from pglast import parse_sql
    from pglast.stream import RawStream

    tree = _one_statement(statement)
    if "SelectStmt" not in tree:
        raise StoreError(f"refused: tracker sql is read-only and runs one query (SELECT, WITH or VALUES), "
                         f"not {_first_word(statement)}")
    query = _names(tree)
    text = RawStream()(parse_sql(statement)[0])
    if _without_locations(_one_statement(text)) != _without_locations(tree):
        raise StoreError("refused: tracker sql could not write this query back exactly as PostgreSQL "
                         "parsed it: simplify it")
    return Query(text, **query)


def _one_statement(statement: str) -> dict:
    from pglast import parser

    try:
        statements = json.loads(parser.parse_sql_json(statement)).get("stmts", [])
    except parser.ParseError as exc:
        raise StoreError(f"SQL error: {first_line(exc)}{_ONE_QUERY}") from None
    if not statements:
        raise StoreError("refused: tracker sql is read-only and runs one query, and this statement holds none")
    if len(statements) > 1:
        raise StoreError(_ONE_STATEMENT)
    return statements[0]["stmt"]


def _first_word(statement: str) -> str:
    from pglast import parser

    words = [t for t in parser.scan(statement) if not t.name.endswith("COMMENT")]
    return statement[words[0].start:words[0].end + 1].upper() if words else "this"


# Fields of a parse tree that say where in the text a node stood, not what it is.
_LOCATIONS = {"location", "list_start", "list_end"}


def _without_locations(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _without_locations(value) for key, value in node.items() if key not in _LOCATIONS}
    if isinstance(node, list):
        return [_without_locations(value) for value in node]
    return node


def _names(tree: dict) -> dict[str, frozenset]:
    """Every name in the parse tree, by what it names: every node of every field is read, so
    LIMIT, OFFSET, window frames, TABLESAMPLE, VALUES lists, sublinks and WITH queries too.
    A writing statement, SELECT INTO and FOR UPDATE/SHARE are refused."""
    found: dict[str, set] = {"functions": set(), "members": set(), "operators": {(None, name) for name in IMPLICIT_OPERATORS},
                             "types": set(), "relations": set(), "ctes": set()}
    stack: list[Any] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            for key, value in node.items():
                _note(key, value, found)
                stack.append(value)
    for _, name in sorted(found["functions"], key=lambda call: call[1]):  # a call's name alone may refuse it
        _refuse_reach(name)
    found["types"] |= found["functions"]  # f(x), where no function f is, casts x to a type f
    return {key: frozenset(names) for key, names in found.items()}


def _note(key: str, value: Any, found: dict[str, set]) -> None:
    if key in _WRITING:
        raise StoreError(f"refused: tracker sql is read-only, and this query holds {_WRITING[key]} (in WITH)")
    if key == "intoClause":
        raise StoreError("refused: tracker sql is read-only, and SELECT INTO makes a table")
    if key == "lockingClause":
        raise StoreError("refused: tracker sql is read-only, and FOR UPDATE or FOR SHARE locks rows")
    if key in ("funcname", "method"):  # a call, a TABLESAMPLE method (a function of its own)
        found["functions"].add(_dotted(value))
    elif key in ("A_Expr", "SubLink") and (value.get("name") or value.get("operName")):  # x + y, x = ANY (...)
        found["operators"].add(_dotted(value.get("name") or value["operName"]))
    elif key == "useOp":  # ORDER BY ... USING
        found["operators"].add(_dotted(value))
    elif key in ("typeName", "TypeName"):
        found["types"].add(_dotted(value["names"]))
    elif key == "RangeVar":
        found["relations"].add((value.get("schemaname"), value["relname"]))
    elif key == "CommonTableExpr":
        found["ctes"].add(value["ctename"])
    elif key == "ColumnRef":
        found["members"].update(_strings(value["fields"][1:]))
    elif key == "A_Indirection":
        found["members"].update(_strings(value["indirection"]))


def _strings(nodes: list) -> list[str]:
    return [node["String"]["sval"] for node in nodes if "String" in node]


def _dotted(nodes: list) -> Name:
    """A name as the parse tree writes it: a list of strings, the last the name itself."""
    names = _strings(nodes)
    return (names[-2] if len(names) > 1 else None), names[-1]


# Every routine each name the query gives may run, on this session's search_path (or in the
# schema given): a function (and its planner support function), an operator's function and its
# estimators, which run when the query is planned; and every cast between PostgreSQL's own types
# that runs a function, which a query may use without naming it. Then the types it names.
_ROUTINES = """
WITH routine AS (
    SELECT p.oid, p.proname, p.prosupport, n.nspname, e.extname
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    LEFT JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
    LEFT JOIN pg_extension e ON e.oid = d.refobjid
), named AS (
    SELECT * FROM unnest(%(schemas)s::text[], %(names)s::text[]) AS q(schema, name)
), own_type AS (
    SELECT t.oid FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    WHERE n.nspname IN ('pg_catalog', 'information_schema')
)
SELECT 'function ' || f.nspname || '.' || f.proname, r.nspname, r.proname, r.extname
FROM routine f JOIN named q ON q.name = f.proname JOIN routine r ON r.oid IN (f.oid, f.prosupport)
WHERE q.schema = f.nspname OR q.schema = '' AND f.nspname = ANY(current_schemas(true))
UNION ALL
SELECT 'operator ' || n.nspname || '.' || o.oprname, r.nspname, r.proname, r.extname
FROM pg_operator o JOIN pg_namespace n ON n.oid = o.oprnamespace JOIN named q ON q.name = o.oprname
JOIN routine r ON r.oid IN (o.oprcode, o.oprrest, o.oprjoin)
WHERE q.schema = n.nspname OR q.schema = '' AND n.nspname = ANY(current_schemas(true))
UNION ALL
SELECT 'cast from ' || format_type(c.castsource, NULL) || ' to ' || format_type(c.casttarget, NULL),
       r.nspname, r.proname, r.extname
FROM pg_cast c JOIN routine r ON r.oid = c.castfunc
WHERE c.castsource IN (SELECT oid FROM own_type) AND c.casttarget IN (SELECT oid FROM own_type)
"""
_TYPES = """
SELECT n.nspname || '.' || t.typname, n.nspname, e.extname
FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
JOIN unnest(%(schemas)s::text[], %(names)s::text[]) AS q(schema, name) ON q.name = t.typname
LEFT JOIN pg_depend d ON d.classid = 'pg_type'::regclass AND d.objid = t.oid AND d.deptype = 'e'
LEFT JOIN pg_extension e ON e.oid = d.refobjid
WHERE q.schema = n.nspname OR q.schema = '' AND n.nspname = ANY(current_schemas(true))
"""
# Each relation the query names, as this session's search_path finds it, and whether it is one of
# the store's (in the schema of its run table).
_RELATIONS = """
SELECT q.name, n.nspname, c.relname, c.relkind,
       c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = to_regclass('run'))
FROM unnest(%(names)s::text[]) AS q(name)
LEFT JOIN pg_class c ON c.oid = to_regclass(q.name) LEFT JOIN pg_namespace n ON n.oid = c.relnamespace
"""
SYSTEM_SCHEMAS = ("pg_catalog", "information_schema")


def _refuse_names(cursor: Any, query: Query) -> None:
    """Refuse ``query`` before the server plans it if a name in it may run code other than
    PostgreSQL's own (``pg_catalog``'s, from no extension) or one of ``OUTSIDE``, or it reads a
    relation other than the store's and the system catalogs': another's view may call its
    owner's functions, which the planner runs when it folds constants."""
    names = query.functions | {(None, member) for member in query.members} | query.operators
    for what, schema, name, extension in cursor.execute(_ROUTINES, _pairs(names)).fetchall():
        _refuse_reach(name)
        _refuse_foreign(f"{schema}.{name}()", schema, extension, what)
    for shown, schema, extension in cursor.execute(_TYPES, _pairs(query.types)).fetchall():
        if schema not in SYSTEM_SCHEMAS or extension:
            raise StoreError(f"refused: tracker sql uses only PostgreSQL's own types (pg_catalog), not {shown} "
                             f"from {_source(schema, extension)}")
    _refuse_relations(cursor, query)


def _pairs(names: frozenset[Name]) -> dict[str, list[str]]:
    ordered = sorted(names, key=lambda n: (n[1], n[0] or ""))
    return {"schemas": [schema or "" for schema, _ in ordered], "names": [name for _, name in ordered]}


def _refuse_reach(name: str) -> None:
    for reach, patterns in OUTSIDE.items():
        if any(fnmatchcase(name, pattern) for pattern in patterns):
            raise StoreError(f"refused: tracker sql is read-only, and {name}() reaches {reach}")


def _refuse_foreign(routine: str, schema: str, extension: str | None, what: str) -> None:
    if schema != "pg_catalog" or extension:
        through = "" if what == f"function {routine[:-2]}" else f", which the {what} runs"
        raise StoreError(f"refused: tracker sql calls only PostgreSQL's own functions (pg_catalog), "
                         f"not {routine} from {_source(schema, extension)}{through}")


def _source(schema: str, extension: str | None) -> str:
    return f"extension {extension}" if extension else f"schema {schema}"


def _refuse_relations(cursor: Any, query: Query) -> None:
    """The store's tables and views, the system catalogs and the query's own WITH queries: nothing
    else (a relation of no schema that is also the name of a WITH query must be neither)."""
    from tracker.store.reader import relations

    ordered = sorted(query.relations, key=lambda r: (r[1], r[0] or ""))
    quoted = [".".join(_quoted(part) for part in relation if part is not None) for relation in ordered]
    store = set(relations())
    for (schema, name), (_, found_schema, found, kind, in_store) in zip(
            ordered, cursor.execute(_RELATIONS, {"names": quoted}).fetchall()):
        if found is None:
            if schema is None and name in query.ctes:
                continue
            raise StoreError(f"SQL error: relation \"{'.'.join(p for p in (schema, name) if p)}\" does not exist")
        if found_schema in SYSTEM_SCHEMAS or in_store and found in store and kind != "f":
            continue
        also = " (rename the WITH query of that name)" if name in query.ctes else ""
        raise StoreError(f"refused: tracker sql reads only the store's tables and views and the system catalogs, "
                         f"not {found_schema}.{found}{also}")


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# The plan is made and measured on the server (a DO block: EXPLAIN cannot be a subquery), and
# handed over through a setting only when it is short. The statement is one query, written by
# read_query and wrapped in _BOUNDED, so EXECUTE runs that one EXPLAIN and nothing else.
_PLAN = f"""
DO $$
DECLARE plan text;
BEGIN
    EXECUTE 'EXPLAIN (VERBOSE, FORMAT JSON) ' || current_setting('tracker.statement') INTO plan;
    PERFORM set_config('tracker.plan_bytes', octet_length(plan)::text, true);
    PERFORM set_config('tracker.plan', CASE WHEN octet_length(plan) <= {PLAN_BYTES} THEN plan ELSE '' END, true);
END
$$"""
# The schemas of the functions a name without one may be, on this session's search_path.
_SCHEMAS = """
SELECT p.proname, n.nspname, e.extname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
LEFT JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
LEFT JOIN pg_extension e ON e.oid = d.refobjid
WHERE p.proname = ANY(%(names)s) AND (n.nspname = ANY(current_schemas(true)) OR n.nspname = ANY(%(schemas)s))
"""


def _refuse_outside(conn: Any, statement: str) -> None:
    """Refuse the query if its plan calls a function outside ``pg_catalog``, or one of
    ``OUTSIDE``, or is longer than ``PLAN_BYTES``: the second guard, after ``_refuse_names``,
    which read what the plan does not show (a multi-row VALUES list, LIMIT, OFFSET)."""
    with conn.cursor() as cursor:
        cursor.execute("SELECT set_config('tracker.statement', %s, true)", (statement,))
        cursor.execute(_PLAN)
        size, plan = cursor.execute("SELECT current_setting('tracker.plan_bytes')::bigint, "
                                    "current_setting('tracker.plan')").fetchone()
        if size > PLAN_BYTES:
            raise StoreError(f"refused: the query's plan is {size / 2**20:.0f} MiB, over tracker sql's "
                             f"{PLAN_BYTES // 2**20} MiB: the planner wrote a long constant into it (such as "
                             "repeat('x', 1000000000)); build no value that long from constants")
        calls = called(plan)
        rows = cursor.execute(_SCHEMAS, {"names": sorted({name for _, name in calls}),
                                         "schemas": sorted({schema for schema, _ in calls if schema})}).fetchall()
    for schema, name in sorted(calls, key=lambda c: (c[1], c[0] or "")):
        where = [(nsp, ext) for proname, nsp, ext in rows if proname == name and schema in (None, nsp)]
        _refuse_function(name, where or ([(schema, None)] if schema else []))


def _refuse_function(name: str, where: list[tuple[str, str | None]]) -> None:
    """``name`` as the query called it, and every (schema, extension) it may come from (none: no
    function of that name, such as COALESCE or a type's modifiers)."""
    _refuse_reach(name)
    for schema, extension in sorted(where, key=lambda w: (w[0] == "pg_catalog", w)):
        _refuse_foreign(f"{schema}.{name}()", schema, extension, f"function {schema}.{name}")


Token = tuple[str | None, str | None]  # (a name, unquoted and folded as the server would; else one character)

# One token of an expression as the server writes it: a quoted name, a string, a name, or any other character.
_TOKEN = re.compile(r'"((?:[^"]|"")*)"|\'(?:[^\']|\'\')*\'|([^\W\d][\w$]*)|(\S)')
# Plan fields that hold a name, never an expression (an alias may hold any character).
_NAMES = {"Node Type", "Relation Name", "Schema", "Alias", "Index Name", "CTE Name", "Subplan Name",
          "Function Name", "Parent Relationship", "Strategy", "Join Type", "Partial Mode", "Operation",
          "Command", "Scan Direction", "Sort Method", "Sort Space Type"}


def called(plan: Any) -> set[tuple[str | None, str]]:
    """Every function a PostgreSQL plan (EXPLAIN VERBOSE, JSON) calls, as (schema, name): the
    schema where the server wrote one (it does when the name alone would not find the function),
    else None. Every field of every node is read, whatever it holds."""
    if isinstance(plan, str):  # some drivers hand json back as text
        plan = json.loads(plan)
    calls: set[tuple[str | None, str]] = set()
    stack = [plan]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(value for key, value in node.items() if key not in _NAMES)
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            calls |= _calls(_expression_tokens(node))
    return calls


def _expression_tokens(expression: str) -> Iterator[Token]:
    for match in _TOKEN.finditer(expression):
        quoted, bare, other = match.groups()
        yield (quoted.replace('""', '"') if quoted is not None else bare.lower() if bare else None), other


def _calls(tokens: Iterator[Token]) -> set[tuple[str | None, str]]:
    """The (schema, name) of each call: a name, or two joined by a dot, then '('."""
    calls = set()
    names: list[str] = []  # the dotted name just read
    dot = False
    for name, other in tokens:
        if name is not None and (dot or not names):
            names, dot = (names + [name] if dot else [name]), False
        elif other == "." and names and not dot:
            dot = True
        else:
            if other == "(" and names and not dot:
                calls.add((names[-2] if len(names) > 1 else None, names[-1]))
            names, dot = ([name] if name is not None else []), False
    return calls


@contextmanager
def _postgresql_errors(psycopg: Any, timeout_s: float) -> Iterator[None]:
    try:
        yield
    except psycopg.Error as exc:
        message = first_line(exc)
        state = getattr(exc, "sqlstate", None) or ""
        if state == "57014":  # query_canceled: by the time limit (a Ctrl-C is raised as itself)
            raise StoreError(_past_limit(timeout_s)) from None
        if "multiple commands" in message:
            raise StoreError(_ONE_STATEMENT) from None
        if state == "55P03":  # lock_not_available: past LOCK_WAIT_MS
            raise StoreError(f"the query waited {LOCK_WAIT_MS / 1000:g} s for a table another session holds "
                             "(tracker upgrade?), and tracker sql waits no longer: try again later") from None
        if _OVER in message:  # _BOUNDED's own error
            size = int(re.sub(r"\D", "", message.split(_OVER, 1)[1]))
            raise StoreError(f"refused: {FETCH_ROWS:,} rows in a row hold {size:,} bytes on the server, over the "
                             f"{FETCH_BYTES >> 20} MiB tracker sql fetches at a time: select fewer or shorter "
                             "values (substr, length)") from None
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
