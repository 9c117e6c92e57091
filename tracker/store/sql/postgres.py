"""User SQL on PostgreSQL: the statement runs only as a role that can only read
(``tracker.store.reader``: judged by its login, never a superuser, a member of a role that reaches
the server's files, programs or other sessions, nor the role that writes the store;
``--reader-url`` or $TRACKER_READER_URL names such a role), on a connection that sets no role or
setting, and whose role is checked again after each fetch.

The statement is read and checked first (``tracker.store.sql.pg_guard``: PostgreSQL's own parser,
the catalog, then the server's plan). Only then is the query declared, in a read-only transaction,
as ``DECLARE ... CURSOR FOR``. It waits at most ``LOCK_WAIT_MS`` for a lock, and can take none of
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
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tracker.errors import StoreError, first_line
from tracker.signals import interruptible
from tracker.store.db import Store
from tracker.store.sql.common import FETCH_BYTES, FETCH_ROWS, ONE_QUERY, ONE_STATEMENT, Answer, past_limit, stream_rows
from tracker.store.sql.pg_guard import read_query, refuse_names, refuse_outside

CANCEL_GRACE_S = 0.5  # how long past the time limit PostgreSQL is given to answer its cancel before the client leaves
LOCK_WAIT_MS = 1000  # the longest a query waits for a lock (of a table being upgraded) before it is refused


def reader_store(store: Store, reader: str | None) -> Store:
    """The store as the reader connection reaches it (``tracker.store.reader``), checked to be the
    same tables; without a reader, the store itself (whose role ``answer`` then checks)."""
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
                raise StoreError(
                    f"the reader connection {reading.where} reaches other tables than {store.where}: "
                    "give it the same database and search_path"
                )
    except StoreError:
        reading.dispose()
        raise
    return reading


@contextmanager
def answer(conn: Any, statement: str, timeout_s: float) -> Iterator[Answer]:
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
            refuse_names(setup, query)  # from the catalog, before anything is planned
        bounded = _BOUNDED.format(query=query.text)
        refuse_outside(conn, bounded)
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

        yield Answer(columns, stream_rows(fetch), notes)


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
            raise StoreError(past_limit(timeout_s)) from None
        raise
    finally:
        with closing:
            ended.set()


def _limit_time(cursor: Any, deadline: float, timeout_s: float) -> None:
    """The server ends the next statement when the query's time is up."""
    left_ms = int((deadline - time.monotonic()) * 1000)
    if left_ms < 1:
        raise StoreError(past_limit(timeout_s))
    cursor.execute(f"SET LOCAL statement_timeout = {left_ms}")
    cursor.execute(f"SET LOCAL idle_in_transaction_session_timeout = {left_ms}")


@contextmanager
def _postgresql_errors(psycopg: Any, timeout_s: float) -> Iterator[None]:
    try:
        yield
    except psycopg.Error as exc:
        message = first_line(exc)
        state = getattr(exc, "sqlstate", None) or ""
        if state == "57014":  # query_canceled: by the time limit (a Ctrl-C is raised as itself)
            raise StoreError(past_limit(timeout_s)) from None
        if "multiple commands" in message:
            raise StoreError(ONE_STATEMENT) from None
        if state == "55P03":  # lock_not_available: past LOCK_WAIT_MS
            raise StoreError(
                f"the query waited {LOCK_WAIT_MS / 1000:g} s for a table another session holds "
                "(tracker upgrade?), and tracker sql waits no longer: try again later"
            ) from None
        if _OVER in message:  # _BOUNDED's own error
            size = int(re.sub(r"\D", "", message.split(_OVER, 1)[1]))
            raise StoreError(
                f"refused: {FETCH_ROWS:,} rows in a row hold {size:,} bytes on the server, over the "
                f"{FETCH_BYTES >> 20} MiB tracker sql fetches at a time: select fewer or shorter "
                "values (substr, length)"
            ) from None
        if state in ("25006", "42501", "0A000"):  # read-only transaction, privilege, DECLARE's own refusals
            raise StoreError(f"refused: tracker sql is read-only ({message})") from None
        if state == "42601":  # a syntax error: DECLARE ... FOR takes a query and nothing else
            raise StoreError(f"SQL error: {message}{ONE_QUERY}") from None
        raise StoreError(f"SQL error: {message}") from None
