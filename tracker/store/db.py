"""Opening the trace store: a SQLite file by default, any SQLAlchemy URL otherwise.

``open_store(db, write=True)`` creates the schema in an empty database and refuses anything that
is not a tracker database, or has a newer schema, before it changes a byte. SQLite runs in WAL
mode with foreign keys on and a busy timeout; write transactions take the write lock up front
(BEGIN IMMEDIATE) so that concurrent writers queue instead of failing on a lock upgrade.
``write=False`` opens read-only (SQLite ``query_only``; PostgreSQL read-only transactions), and
leaves nothing beside the file: a SQLite reader connects read-write (``mode=rw``, which never
creates) with ``query_only`` on, because only such a connection removes the ``-wal`` and ``-shm``
files a WAL database is read through when it closes last; where the file or its folder cannot be
written, it connects ``mode=ro``, and where even that needs files it cannot create (a read-only
folder, no writer connected), ``immutable``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracker.errors import StoreError, first_line, shorten
from tracker.extras import install
from tracker.paths import expand
from tracker.signals import held
from tracker.store import lifecycle

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine
    from sqlalchemy.orm import Session

DEFAULT_DB = "trace.db"
BUSY_TIMEOUT_S = 60


def _decoded(decode: Callable[[str], Any]) -> Callable[[bytes], Any]:
    """``decode`` of a stored value, or the value as text where it does not decode (a file from
    elsewhere is hostile input: a bad value is shown, never a crash)."""

    def convert(stored: bytes) -> Any:
        text = stored.decode(errors="replace")
        try:
            return decode(text)
        except (ValueError, RecursionError):  # RecursionError: JSON nested beyond Python's stack
            return text

    return convert


# A SQLite store's columns decoded by their declared types, as the ORM decodes them (``Store.rows``
# reads without it). Registered for the whole process, they act only on connections opened with
# ``detect_types``: ``rows``' own, never the ORM's or ``tracker sql``'s.
sqlite3.register_converter("JSON", _decoded(json.loads))
sqlite3.register_converter("BOOLEAN", lambda stored: stored not in (b"0", b""))
sqlite3.register_converter("DATETIME", _decoded(datetime.fromisoformat))


@dataclass
class Store:
    """An open trace store. A SQLite file is read through ``rows`` without SQLAlchemy, whose import
    alone takes longer than a read command may (``tracker runs`` in 0.3 s); the SQLAlchemy engine is
    made the first time something needs it (the ORM, a write, pandas)."""

    where: str  # the path, or the URL without its password, for messages
    writable: bool
    dialect: str  # the SQL it speaks: sqlite, postgresql, ...
    make_engine: Callable[[], Engine]
    sqlite_connect: Callable[..., sqlite3.Connection] | None = None  # a SQLite file's own connections
    upgraded_from: int | None = None  # the schema version opening it to write migrated from
    # A long-lived reader (tracker serve) keeps the view frames of complete runs here, whose rows
    # never change (queries.view_frame); None, the default, keeps nothing.
    frames: dict | None = None

    @cached_property
    def engine(self) -> Engine:
        return self.make_engine()

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session whose transaction commits on success and rolls back on any exception; Ctrl-C
        and SIGTERM wait for it (``tracker.signals.held``)."""
        from sqlalchemy.orm import Session

        with held(), Session(self.engine, expire_on_commit=False) as session, session.begin():
            yield session

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A connection in a transaction, as ``session`` for Core statements."""
        with held(), self.engine.begin() as conn:
            yield conn

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A connection; on a store opened to write, signals wait for it as for ``session`` (a read-only
        one holds no lock, so Ctrl-C stops a long query at once)."""
        with held() if self.writable else nullcontext(), self.engine.connect() as conn:
            yield conn

    def rows(self, sql: str, **params: Any) -> list[dict]:
        """The rows of one of tracker's own queries (``:name`` parameters) as dicts, each column decoded
        as the schema declares it (JSON, booleans, datetimes)."""
        if self.sqlite_connect is None:
            from sqlalchemy import text

            with self.connect() as conn:
                return [dict(row) for row in conn.execute(text(sql), params).mappings()]
        with held() if self.writable else nullcontext(), closing(self.sqlite_connect(decoded=True)) as conn:
            cursor = conn.execute(sql, params)
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row)) for row in cursor]

    def dispose(self) -> None:
        if "engine" in self.__dict__:
            with held():
                self.engine.dispose()


def resolve(db: str | None) -> str:
    """The database to use: ``--db``, else ``$TRACKER_DB``, else ./trace.db."""
    return db or os.environ.get("TRACKER_DB") or DEFAULT_DB


def open_store(db: str | None = None, *, write: bool, create: bool = True) -> Store:
    """The trace store at ``db`` (a path or URL; default $TRACKER_DB, else ./trace.db), checked to
    be ours and current, created (unless ``create`` is False) or upgraded when opened to write.
    Signals wait for it: a lock taken while opening must not outlive an interrupted open."""
    with held():
        return _open(db, write, create)


def _open(db: str | None, write: bool, create: bool) -> Store:
    target = resolve(db)
    if "://" not in target:
        return _open_sqlite(_path(target), write, create)
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(target)
    except (ArgumentError, ValueError):
        raise StoreError(f"malformed database URL '{target}' (expected e.g. postgresql://user@host/db)") from None
    if url.get_backend_name() == "sqlite":
        if not url.database or url.database == ":memory:":
            raise StoreError("an in-memory SQLite database cannot hold a trace; give a file path")
        if url.query:  # SQLite's own URI parameters (mode=ro, ...) would be silently ignored
            raise StoreError(
                f"a SQLite URL takes no parameters ('?{shorten(str(url).partition('?')[2])}'): "
                "give sqlite:///PATH; tracker opens a store read-only itself where it only reads"
            )
        return _open_sqlite(_path(url.database), write, create)
    return _open_url(url, write, create)


def _path(name: str) -> Path:
    """A SQLite store's file: a path, never one of SQLite's own URIs ('file:trace.db?mode=ro'),
    which SQLite would read as a URI and tracker as a file of that name."""
    if name[:5].lower() == "file:":
        raise StoreError(
            f"'{shorten(name)}' is a SQLite URI, not a path: give the database file's path, "
            "or a URL such as sqlite:///PATH or postgresql://..."
        )
    return expand(name, "cannot open", StoreError).absolute()


def _open_sqlite(path: Path, write: bool, create: bool) -> Store:
    where = str(path)
    try:
        if path.is_dir():
            raise StoreError(f"{where} is a directory, not a trace database")
        if path.is_symlink() and not path.exists():  # writing would create the link's target
            raise StoreError(f"{where} is a symbolic link to {shorten(os.readlink(path))}, which does not exist")
        if write and create:
            _check_writable(path)
        elif not path.exists():
            raise StoreError(f"no trace database at {where} (run `tracker profile` to create one, or give --db)")
    except OSError as exc:  # a name too long, a folder that cannot be searched
        raise StoreError(f"cannot open {where}: {exc.strerror}") from None
    uri = path.as_uri() if write else _read_uri(path)

    def connect(decoded: bool = False) -> sqlite3.Connection:
        conn = sqlite3.connect(
            uri,
            uri=True,
            timeout=BUSY_TIMEOUT_S,
            isolation_level=None,
            detect_types=sqlite3.PARSE_DECLTYPES if decoded else 0,
        )
        if not write:
            conn.execute("PRAGMA query_only = ON")
            # ATTACH (and VACUUM INTO, which attaches) would create files even on a read-only connection
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
        return conn

    def make_engine() -> Engine:
        from sqlalchemy import create_engine, event
        from sqlalchemy.pool import NullPool

        engine = create_engine("sqlite://", creator=connect, poolclass=NullPool)
        begin = "BEGIN IMMEDIATE" if write else "BEGIN"
        event.listen(engine, "begin", lambda conn: conn.exec_driver_sql(begin))
        return engine

    store = Store(where, write, "sqlite", make_engine, connect)
    if write:
        _prepare(store, create)
        _use_wal(connect, where)  # only now that the file is known to be ours: WAL is a persistent change
    else:
        try:
            with closing(connect()) as conn:
                _refuse_older(store, lifecycle.state(_sqlite_tables(conn), lambda: _sqlite_version(conn), where))
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open {where}: {first_line(exc)}") from None
    return store


def _sqlite_tables(conn: sqlite3.Connection) -> set[str]:
    """The file's tables, as SQLAlchemy lists them (SQLite's own, sqlite_*, left out)."""
    return {
        name
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite~_%' ESCAPE '~'"
        )
    }


def _sqlite_version(conn: sqlite3.Connection) -> int | None:
    return next(iter(conn.execute(lifecycle.VERSION_QUERY).fetchone() or ()), None)


# SQLite's primary result codes that mean a way of opening is not allowed here (permissions, a
# read-only file or folder), so the next, less clean way may work. Any other failure (a damaged or
# foreign file) is the file's: a read-only connection would then leave its -wal and -shm behind.
_NOT_ALLOWED_HERE = {sqlite3.SQLITE_PERM, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN}


def _read_uri(path: Path) -> str:
    """The first way of reading ``path`` that works here, most cleanly first (the module's
    docstring says why): read-write with query_only, read-only, immutable."""
    for mode in ("mode=rw", "mode=ro", "mode=ro&immutable=1"):
        uri = f"{path.as_uri()}?{mode}"
        try:
            with closing(sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)) as conn:
                conn.execute("PRAGMA query_only = ON")
                conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            return uri
        except sqlite3.DatabaseError as exc:
            error = exc
            if getattr(exc, "sqlite_errorcode", sqlite3.SQLITE_CANTOPEN) & 0xFF not in _NOT_ALLOWED_HERE:
                break
    raise StoreError(f"cannot open {path}: {first_line(error)}")


def _use_wal(connect, where: str) -> None:
    """Switch to WAL once. The switch needs the database to itself and SQLite does not wait for
    that (no busy handler), so a process that finds others connected retries until they finish."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        with closing(connect()) as conn:
            try:
                if conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal":
                    return
            except sqlite3.OperationalError:
                pass
        if time.monotonic() > deadline:
            raise StoreError(f"cannot switch {where} to WAL mode: the database stayed locked")
        time.sleep(0.05)


def _check_writable(path: Path) -> None:
    parent = path.parent
    if not parent.is_dir():
        raise StoreError(f"cannot create {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise StoreError(f"cannot write {path}: permission denied")


def _open_url(url, write: bool, create: bool) -> Store:
    from sqlalchemy import create_engine
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError
    from sqlalchemy.pool import NullPool

    where = url.render_as_string(hide_password=True)
    args = {}
    if url.get_backend_name() == "postgresql" and not write:  # keep the URL's own options (search_path)
        options = f"{url.query.get('options', '')} -c default_transaction_read_only=on".strip()
        args["connect_args"] = {"options": options}
    try:
        engine = create_engine(url, poolclass=NullPool, **args)
    except (ArgumentError, NoSuchModuleError) as exc:
        raise StoreError(f"cannot use database URL '{where}': {first_line(exc)}") from None
    except ImportError as exc:
        raise StoreError(f"no driver for '{where}': {exc} (for PostgreSQL: {install('postgres')})") from None
    store = Store(where, write, engine.dialect.name, lambda: engine)
    _prepare(store, create)
    return store


def _prepare(store: Store, create: bool) -> None:
    """Check the database is ours and current; create the schema in an empty one (write mode, where
    ``create``), or migrate an older one (write mode)."""
    from sqlalchemy.exc import DBAPIError

    try:
        with store.engine.connect() as conn:
            state = lifecycle.check(conn, store.where)
            conn.rollback()
            if state == "empty" and not create:
                raise StoreError(
                    f"{store.where} is not a tracker trace database (it holds no tables); refusing to touch it"
                )
            if state == "empty" and store.writable:
                lifecycle.create(conn, store.where)
            elif state == "older" and store.writable:
                store.upgraded_from = lifecycle.version(conn)
                lifecycle.migrate(conn, store.where)
            else:
                _refuse_older(store, state)
    except DBAPIError as exc:
        store.dispose()
        raise StoreError(f"cannot open {store.where}: {first_line(exc.orig or exc)}") from None
    except StoreError:
        store.dispose()
        raise


def _refuse_older(store: Store, state: str) -> None:
    """A store opened to read must hold this tracker's schema: an older one is upgraded by a write."""
    if state == "older":
        raise StoreError(
            f"{store.where} has an older trace schema than this tracker's "
            f"v{lifecycle.SCHEMA_VERSION}: `tracker upgrade --db {store.where}` adds what is new "
            "and keeps every run"
        )
