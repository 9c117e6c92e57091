"""The PostgreSQL role ``tracker sql`` runs a user's statement as: one that can read tracker's
tables and views and nothing else (``tracker reader-role`` prints or makes it).

A plan check cannot see every expression of a query (EXPLAIN shows no multi-row VALUES list and no
LIMIT or OFFSET expression), so what the statement may reach is set by its role: never a superuser,
a member of a role that reaches the server's files, programs or other sessions, nor a role that
writes the store. Membership counts whether inherited or not: inside a query, ``set_config('role',
...)`` becomes any role the session's user is a member of.
"""

from __future__ import annotations

import os
import re
from typing import Any

from tracker.errors import StoreError

READER_ENV = "TRACKER_READER_URL"
DEFAULT_READER = "tracker_reader"
# Predefined roles whose members reach beyond the database (PostgreSQL 11 and later).
BEYOND = ("pg_read_server_files", "pg_write_server_files", "pg_execute_server_program", "pg_signal_backend")
_WRITES = "INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER"
_HOW = (f"give a role that can only read with --reader-url URL or ${READER_ENV} "
        "(`tracker reader-role --db URL` prints how to make one)")

# Every role the session's user can become, and what each may do that a reader must not.
_ROLES = f"""
SELECT r.rolname, r.rolsuper, r.rolcreaterole, r.rolname = ANY(%(beyond)s),
       EXISTS (SELECT 1 FROM unnest(%(tables)s::text[]) AS t(name)
               WHERE to_regclass(t.name) IS NOT NULL
                 AND has_table_privilege(r.oid, to_regclass(t.name), '{_WRITES}'))
FROM pg_roles r WHERE pg_has_role(current_user, r.oid, 'MEMBER')
ORDER BY r.rolname <> current_user, r.rolname
"""


def tables() -> list[str]:
    from tracker.store.schema import Base

    return sorted(Base.metadata.tables)


def relations() -> list[str]:
    from tracker.store.queries import relations as store_relations

    return sorted(store_relations())


def refuse_privileged(cursor: Any) -> None:
    """Refuse, in one line that says how to fix it, a session whose role could reach beyond reading."""
    rows = cursor.execute(_ROLES, {"beyond": list(BEYOND), "tables": tables()}).fetchall()
    user = rows[0][0] if rows else "?"
    for name, superuser, creates_roles, beyond, writes in rows:
        through = "" if name == user else f" through its membership in '{name}'"
        why = ("is a superuser" if superuser else "may create roles" if creates_roles else
               f"reaches {_REACHES[name]}" if beyond else "writes the store" if writes else "")
        if why:
            raise StoreError(f"refused: tracker sql runs queries only as a role that can only read, and "
                             f"'{user}' {why}{through}: {_HOW}")


_REACHES = {"pg_read_server_files": "the server's files", "pg_write_server_files": "the server's files",
            "pg_execute_server_program": "the server's programs", "pg_signal_backend": "other sessions"}


def reader_url(reader: str | None) -> str | None:
    """The reader connection: the one given, else $TRACKER_READER_URL, else none."""
    return reader or os.environ.get(READER_ENV) or None


_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def role_sql(name: str, schema: str, database: str) -> list[str]:
    """The statements that make ``name`` a login role that reads tracker's tables and views in
    ``schema`` and nothing else (set a password, or allow it in pg_hba.conf, to log in)."""
    if not _NAME.fullmatch(name):
        raise StoreError(f"the role name '{name}' must be lower-case letters, digits and _ (e.g. {DEFAULT_READER})")
    quoted_schema = '"' + schema.replace('"', '""') + '"'
    quoted_db = '"' + database.replace('"', '""') + '"'
    return [
        f"CREATE ROLE {name} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT",
        f"GRANT CONNECT ON DATABASE {quoted_db} TO {name}",
        f"GRANT USAGE ON SCHEMA {quoted_schema} TO {name}",
        *(f"GRANT SELECT ON {quoted_schema}.{relation} TO {name}" for relation in relations()),
        # what a later tracker upgrade adds, when the store's owner runs these statements
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {quoted_schema} GRANT SELECT ON TABLES TO {name}",
    ]


def reader_statements(store: Any, name: str) -> list[str]:
    """``role_sql`` for the PostgreSQL store ``store``: its database, and the schema of its tables."""
    if store.dialect != "postgresql":
        raise StoreError("tracker reader-role is for a PostgreSQL store (--db postgresql://...); "
                         "tracker sql reads a SQLite file through a read-only connection already")
    with store.engine.connect() as conn:
        database, schema = conn.exec_driver_sql(
            "SELECT current_database(), n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.oid = to_regclass('run')").one()
    return role_sql(name, schema, database)


def apply(store: Any, name: str, statements: list[str]) -> None:
    """Run ``statements`` on the store as its own role, in one transaction; a role ``name`` that
    exists already is granted what it lacks."""
    from sqlalchemy.exc import DBAPIError

    try:
        with store.engine.begin() as conn:
            conn.exec_driver_sql("SET TRANSACTION READ WRITE")  # the store was opened to read
            exists = conn.exec_driver_sql("SELECT 1 FROM pg_roles WHERE rolname = %(n)s", {"n": name}).first()
            for statement in statements[1:] if exists else statements:
                conn.exec_driver_sql(statement)
    except DBAPIError as exc:
        message = (str(exc.orig or exc).strip().splitlines() or ["failed"])[0]
        raise StoreError(f"cannot make the role {name} as {store.where}'s role: {message} (run tracker "
                         "reader-role without --apply and give its SQL to a role that may create roles)") from None
