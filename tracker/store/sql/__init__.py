"""User SQL (``tracker sql``, ``tracker.run_sql``): one query, read-only and bounded, by construction.

A user's statement is hostile input. What it may do is set by how it is run, and on PostgreSQL also
by the server's own parser's reading of it, never by a reading of tracker's own:

- ``sqlite.py``: the SQLite runner (a read-only connection, an authorizer, a thread of its own);
- ``postgres.py``: the PostgreSQL runner (a role that can only read, a bounded cursor, the time limit);
- ``pg_guard.py``: what a PostgreSQL statement may name, read by the server's own parser and catalog;
- ``common.py``: what both share: the limits, the ``Answer``, rows made plain as they stream.

Rows stream: a fetch holds ``FETCH_ROWS`` at a time, whatever the query returns, and about
``FETCH_BYTES`` at most (on SQLite a batch ends early there; on PostgreSQL the server refuses more).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from itertools import islice
from typing import Any

from tracker.errors import StoreError
from tracker.store.db import Store
from tracker.store.sql import postgres, sqlite
from tracker.store.sql.common import (
    DEFAULT_TIMEOUT_S,
    FETCH_BYTES,
    FETCH_ROWS,
    MAX_ROWS,
    MAX_TIMEOUT_S,
    Answer,
    row_limit,
    time_limit,
)
from tracker.store.sql.pg_guard import OUTSIDE, PLAN_BYTES, Query, called, read_query
from tracker.store.sql.postgres import CANCEL_GRACE_S, LOCK_WAIT_MS
from tracker.store.sql.sqlite import SQLITE_HEAP_BYTES, SQLITE_MAX_LENGTH

__all__ = [
    "CANCEL_GRACE_S",
    "DEFAULT_TIMEOUT_S",
    "FETCH_BYTES",
    "FETCH_ROWS",
    "LOCK_WAIT_MS",
    "MAX_ROWS",
    "MAX_TIMEOUT_S",
    "OUTSIDE",
    "PLAN_BYTES",
    "SQLITE_HEAP_BYTES",
    "SQLITE_MAX_LENGTH",
    "Answer",
    "Query",
    "called",
    "query",
    "read_query",
    "row_limit",
    "run_sql",
    "time_limit",
]


def run_sql(
    store: Store, statement: str, *, timeout_s: float | None = None, limit: int | None = None, reader: str | None = None
) -> tuple[list[str], list[tuple]]:
    """(column names, rows) of one read-only query; at most ``limit`` rows."""
    limit = row_limit(limit)
    with query(store, statement, timeout_s=timeout_s, reader=reader) as answer:
        return answer.columns, list(islice(answer.rows, limit))


@contextmanager
def query(
    store: Store, statement: str, *, timeout_s: float | None = None, reader: str | None = None
) -> Iterator[Answer]:
    """Run one read-only query on ``store`` (module docstring): an ``Answer`` whose rows stream
    while the block lasts. A statement that could write, in the database or beside it, is refused
    in one line, as is one that runs past ``timeout_s`` seconds (None: ``DEFAULT_TIMEOUT_S``).
    On PostgreSQL it runs through ``reader``, a URL of the same store as a role that can only read
    (None: $TRACKER_READER_URL, else the store's own connection, refused unless it can only read)."""
    timeout_s = time_limit(timeout_s)
    if not statement.strip():
        raise StoreError("refused: tracker sql is read-only and runs one query, and this statement is empty")
    if reader and store.dialect == "sqlite":
        raise StoreError(
            "a reader connection is for a PostgreSQL store: tracker sql reads a SQLite file "
            "through a read-only connection already (leave out --reader-url)"
        )
    if store.sqlite_connect is not None:  # on a connection of its own, in a thread of its own
        with sqlite.answer(store.sqlite_connect, statement, timeout_s) as answer:
            yield answer
        return
    store = postgres.reader_store(store, reader)
    connection = store.engine.raw_connection()
    driver: Any = connection.driver_connection  # psycopg's own connection
    try:
        with postgres.answer(driver, statement, timeout_s) as answer:
            yield answer
    finally:
        connection.invalidate()  # never back to a pool: its session may hold the query's settings
