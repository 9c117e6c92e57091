"""User SQL on SQLite: the store's read-only connection (``query_only``, no ATTACH), the driver's
own refusal of a second statement, and an authorizer that allows reading and nothing else (no
write, PRAGMA that sets, transaction or extension). No value may exceed ``SQLITE_MAX_LENGTH``.
The statement runs in a thread of its own while the caller's waits for its rows: the time limit,
Ctrl-C and SIGTERM end the wait even inside one long C call of SQLite's, and then interrupt the
query. SQLite's memory in the process is capped (``SQLITE_HEAP_BYTES``), and a row over
``FETCH_BYTES`` is refused; a batch of rows ends early there."""

from __future__ import annotations

import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tracker.errors import StoreError, first_line, shorten
from tracker.signals import interruptible
from tracker.store.queries import plain
from tracker.store.sql.common import FETCH_BYTES, FETCH_ROWS, ONE_QUERY, ONE_STATEMENT, Answer, past_limit

_SQLITE_STEPS = 10_000  # SQLite VM instructions between two looks at whether the query was stopped
SQLITE_READS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
SQLITE_READ_PRAGMAS = {
    "table_info",
    "table_xinfo",
    "table_list",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
    "collation_list",
    "function_list",
    "module_list",
    "pragma_list",
    "compile_options",
}
SQLITE_REFUSED_FUNCTIONS = {"load_extension", "fts3_tokenizer"}
# The longest string, blob or row a query may build, in bytes. SQLite's own limit is 1 GB, and a
# single function call (printf('%.*c', 100000000, 'a')) builds such a value inside one C call that
# no time limit or signal reaches, in this process's memory. A trace store's values are kilobytes.
SQLITE_MAX_LENGTH = 16 << 20
# The most memory SQLite may hold in this process (``PRAGMA hard_heap_limit``, which is one limit
# for the whole process, kept once set). A row's values are all held at once before it is handed
# over (Python then copies them), and constants are built before the first row: 40 columns of
# 16 MiB would be 640 MiB. Four values at the longest fit; a store's queries need a few MiB.
SQLITE_HEAP_BYTES = 64 << 20
_SQLITE_GRACE_S = 0.5  # how long an ended query's thread is waited for, so that it closes its connection
_END = "end of rows"  # what the query's thread hands over after its last row


@contextmanager
def answer(connect: Callable[[], sqlite3.Connection], statement: str, timeout_s: float) -> Iterator[Answer]:
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
                while (batch := next_batch(cursor)) and self._hand(batch):
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
            raise StoreError(past_limit(timeout_s)) from None
        if isinstance(item, BaseException):
            raise item
        if item is not _END and time.monotonic() > deadline:
            raise StoreError(past_limit(timeout_s))
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


def next_batch(cursor: sqlite3.Cursor) -> list[tuple]:
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
            raise StoreError(
                f"refused: a row of the query holds {row_size:,} bytes, over the {FETCH_BYTES >> 20} MiB "
                "tracker sql fetches at a time: select fewer or shorter values (substr, length)"
            )
        size += row_size
        if len(rows) == FETCH_ROWS or size >= FETCH_BYTES:
            break
    return rows


def _authorize(refused: list[str], action: int, first: str | None, second: str | None, *_) -> int:
    """Reading, and nothing else; what is refused is noted for the message."""
    if action in SQLITE_READS and not (
        action == sqlite3.SQLITE_FUNCTION and second and second.lower() in SQLITE_REFUSED_FUNCTIONS
    ):
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


_SQLITE_ACTIONS = {
    getattr(sqlite3, f"SQLITE_{name}"): name.replace("_", " ")
    for name in (
        "CREATE_INDEX",
        "CREATE_TABLE",
        "CREATE_TEMP_INDEX",
        "CREATE_TEMP_TABLE",
        "CREATE_TEMP_TRIGGER",
        "CREATE_TEMP_VIEW",
        "CREATE_TRIGGER",
        "CREATE_VIEW",
        "DELETE",
        "DROP_INDEX",
        "DROP_TABLE",
        "DROP_TEMP_INDEX",
        "DROP_TEMP_TABLE",
        "DROP_TEMP_TRIGGER",
        "DROP_TEMP_VIEW",
        "DROP_TRIGGER",
        "DROP_VIEW",
        "INSERT",
        "TRANSACTION",
        "UPDATE",
        "ATTACH",
        "DETACH",
        "ALTER_TABLE",
        "REINDEX",
        "ANALYZE",
        "CREATE_VTABLE",
        "DROP_VTABLE",
        "SAVEPOINT",
    )
}


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
            raise StoreError(past_limit(timeout_s)) from None
        if code == sqlite3.SQLITE_NOMEM:
            raise StoreError(_out_of_heap()) from None
        if code == sqlite3.SQLITE_TOOBIG:
            raise StoreError(
                f"refused: the query builds a value over {SQLITE_MAX_LENGTH >> 20} MiB, tracker sql's "
                "limit on one value on SQLite (tracker.store.sql.SQLITE_MAX_LENGTH)"
            ) from None
        if refused:
            raise StoreError(f"refused: tracker sql is read-only and runs queries, not {refused[0]}") from None
        if "one statement at a time" in message:
            raise StoreError(ONE_STATEMENT) from None
        if "readonly" in message or "read-only" in message:
            raise StoreError(f"refused: tracker sql is read-only ({message})") from None
        raise StoreError(f"SQL error: {message}{ONE_QUERY if 'syntax error' in message else ''}") from None


def _out_of_heap() -> str:
    return (
        f"refused: the query holds over {SQLITE_HEAP_BYTES >> 20} MiB at once, tracker sql's limit on "
        "SQLite's memory (tracker.store.sql.SQLITE_HEAP_BYTES): select fewer or shorter values"
    )
