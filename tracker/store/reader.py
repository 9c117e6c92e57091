"""The PostgreSQL role ``tracker sql`` runs a user's statement as: one that can read tracker's
tables and views and nothing else (``tracker reader-role`` prints or makes it).

A plan check cannot see every expression of a query, so what the statement may reach is set by
the role it runs as, judged by its login: the session's user, the user it logged in as, and every
role either is a member of, inherited or not, directly or through others (inside a query,
``set_config('role', ...)`` becomes any of them). None may be a superuser, a member of a role
that reaches the server's files, programs or other sessions, nor a role that writes the store.
The connection may set no role and no setting but where names are found and how values are shown
(``CONNECTION_SETTINGS``): a role's own settings (``READER_SETTINGS``) bound what it spends on the
server, and a connection's options would override them. The session is pinned: its transaction is
read-only, and its role is checked to be its login's again after each fetch of the query's rows.
"""

from __future__ import annotations

import os
import re
from typing import Any

from tracker.errors import StoreError
from tracker.store.sql.common import DEFAULT_TIMEOUT_S

READER_ENV = "TRACKER_READER_URL"
DEFAULT_READER = "tracker_reader"
# Predefined roles whose members reach beyond the database (PostgreSQL 11 and later).
BEYOND = ("pg_read_server_files", "pg_write_server_files", "pg_execute_server_program", "pg_signal_backend")
_WRITES = "INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER"
_HOW = (
    f"give a role that can only read with --reader-url URL or ${READER_ENV} "
    "(`tracker reader-role --db URL` prints how to make one)"
)

# What a reader's sessions may spend on the server, set on its role so that they hold for every
# session it opens, through tracker or not (tracker sql sets each statement's own time limit
# within --timeout; the role's own bounds the rest).
READER_SETTINGS = {
    "statement_timeout": f"{DEFAULT_TIMEOUT_S:g}s",  # tracker sql's default time limit
    "idle_in_transaction_session_timeout": f"{DEFAULT_TIMEOUT_S:g}s",  # an abandoned session lets go as soon
    "work_mem": "16MB",  # a sort or hash's memory before it spills: the views' aggregates fit in it
    "temp_file_limit": "1GB",  # a session's spill to disk: a sort of a large store fits, the probe's 2-3 GB not
}
# What a connection may set itself (URL options, libpq's environment): where names are found and
# how values are shown. Any other setting would override the role's bounds, or switch its role.
CONNECTION_SETTINGS = ("search_path", "application_name", "client_encoding", "datestyle", "timezone")

# Every role the login can become (the session's user, and the user it logged in as, which a
# superuser's session authorization would hide), and what each may do that a reader must not.
_ROLES = f"""
WITH login(oid) AS (SELECT oid FROM pg_roles WHERE rolname = session_user
                    UNION SELECT usesysid FROM pg_stat_activity WHERE pid = pg_backend_pid())
SELECT r.rolname, r.rolsuper, r.rolcreaterole, r.rolname = ANY(%(beyond)s),
       EXISTS (SELECT 1 FROM unnest(%(tables)s::text[]) AS t(name)
               WHERE to_regclass(t.name) IS NOT NULL
                 AND has_table_privilege(r.oid, to_regclass(t.name), '{_WRITES}'))
FROM pg_roles r WHERE EXISTS (SELECT 1 FROM login WHERE pg_has_role(login.oid, r.oid, 'MEMBER'))
ORDER BY r.rolname <> session_user, r.rolname
"""
# Settings the client sent when it connected, beyond CONNECTION_SETTINGS and the one a store
# opened to read sets itself (tracker.store.db), which only forbids writing.
_OWN_SETTING = "default_transaction_read_only"
_SENT = "SELECT name FROM pg_settings WHERE source = 'client' AND lower(name) <> ALL(%(allowed)s) ORDER BY name"
# Which of READER_SETTINGS the login's role (or its database) does not set, or sets to no bound.
_UNBOUNDED = """
SELECT s.name FROM pg_settings s
WHERE s.name = ANY(%(names)s) AND (s.reset_val IN ('0', '-1') OR NOT EXISTS (
    SELECT 1 FROM pg_db_role_setting d, unnest(d.setconfig) AS c(setting)
    WHERE d.setrole IN (0, (SELECT oid FROM pg_roles WHERE rolname = session_user))
      AND d.setdatabase IN (0, (SELECT oid FROM pg_database WHERE datname = current_database()))
      AND split_part(c.setting, '=', 1) = s.name))
ORDER BY s.name
"""


def tables() -> list[str]:
    from tracker.store.schema import Base

    return sorted(Base.metadata.tables)


def relations() -> list[str]:
    from tracker.store.queries import relations as store_relations

    return sorted(store_relations())


def refuse_privileged(cursor: Any) -> None:
    """Refuse, in one line that says how to fix it, a session whose login could reach beyond
    reading, that runs as another role than its login, or whose connection set a setting."""
    rows = cursor.execute(_ROLES, {"beyond": list(BEYOND), "tables": tables()}).fetchall()
    user = rows[0][0] if rows else "?"
    for name, superuser, creates_roles, beyond, writes in rows:
        through = "" if name == user else f" through its membership in '{name}'"
        why = (
            "is a superuser"
            if superuser
            else "may create roles"
            if creates_roles
            else f"reaches {_REACHES[name]}"
            if beyond
            else "writes the store"
            if writes
            else ""
        )
        if why:
            raise StoreError(
                f"refused: tracker sql runs queries only as a role that can only read, and "
                f"'{user}' {why}{through}: {_HOW}"
            )
    refuse_role_change(cursor)
    sent = [name for (name,) in cursor.execute(_SENT, {"allowed": [*CONNECTION_SETTINGS, _OWN_SETTING]}).fetchall()]
    if sent:
        raise StoreError(_settings_refused("the connection (its options, a service, or libpq's environment)", sent[0]))


def refuse_role_change(cursor: Any) -> None:
    """The session's pin: refuse it where it runs as another role than its login's, or where its
    transaction may write."""
    current, session, read_only = cursor.execute(
        "SELECT current_user, session_user, current_setting('transaction_read_only')"
    ).fetchone()
    if current != session:
        raise StoreError(
            f"refused: tracker sql runs a query only as the role it logged in as, and this session "
            f"of '{session}' runs as '{current}'"
        )
    if read_only != "on":
        raise StoreError("refused: tracker sql runs a query only in a read-only transaction")


def unbounded(cursor: Any) -> str | None:
    """A note, where the login's role lacks any of READER_SETTINGS (or sets it to no bound)."""
    missing = [name for (name,) in cursor.execute(_UNBOUNDED, {"names": list(READER_SETTINGS)}).fetchall()]
    if not missing:
        return None
    user = cursor.execute("SELECT session_user").fetchone()[0]
    return (
        f"the reader '{user}' has no role setting for {', '.join(missing)}, which bound what its queries "
        "may spend on the server: `tracker reader-role --db URL` prints them"
    )


def refuse_connection_settings(url: Any) -> None:
    """Refuse, in one line, a PostgreSQL URL (SQLAlchemy's) or a libpq environment that sets a
    role or a setting beyond CONNECTION_SETTINGS: its ``options``, a service (whose file may hold
    any), $PGOPTIONS, $PGSERVICE."""
    if url.get_backend_name() != "postgresql":
        return
    options = url.query.get("options", ())
    sources = [
        ("the connection URL's options", " ".join((options,) if isinstance(options, str) else options)),
        ("$PGOPTIONS", os.environ.get("PGOPTIONS", "")),
    ]
    for source, value in sources:
        for name in _options_set(value):
            if name not in CONNECTION_SETTINGS:
                raise StoreError(_settings_refused(source, name))
    for source, service in (
        ("the connection URL", url.query.get("service")),
        ("$PGSERVICE", os.environ.get("PGSERVICE")),
    ):
        if service:
            raise StoreError(
                f"refused: {source} names a connection service, whose file may set a role or settings "
                "tracker sql takes from no connection: give the reader's URL in full"
            )


def _options_set(options: str) -> list[str]:
    """The settings a libpq ``options`` string sets, as the server reads it (-c name=value,
    --name=value; any other switch, such as -S for work_mem, by itself)."""
    words = iter(re.split(r"(?<!\\)\s+", options.strip()) if options.strip() else [])
    names = []
    for word in words:
        setting = next(words, "") if word == "-c" else word[2:] if word.startswith(("-c", "--")) else None
        names.append(word if setting is None else setting.split("=", 1)[0].lower().replace("-", "_"))
    return names


def _settings_refused(source: str, name: str) -> str:
    return (
        f"refused: {name} is set by {source}, and tracker sql takes no setting from a connection but "
        f"{', '.join(CONNECTION_SETTINGS)} (a reader's role settings bound what it spends): leave it out"
    )


_REACHES = {
    "pg_read_server_files": "the server's files",
    "pg_write_server_files": "the server's files",
    "pg_execute_server_program": "the server's programs",
    "pg_signal_backend": "other sessions",
}


def reader_url(reader: str | None) -> str | None:
    """The reader connection: the one given, else $TRACKER_READER_URL, else none."""
    return reader or os.environ.get(READER_ENV) or None


_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def role_sql(name: str, schema: str, database: str, owner: str | None = None) -> list[str]:
    """The statements that make ``name`` a login role that reads tracker's tables and views in
    ``schema`` and nothing else, within READER_SETTINGS (set a password, or allow it in
    pg_hba.conf, to log in). With ``owner``, the store's owner, tables it adds later to ``schema``
    (a tracker upgrade) are readable too; tables anyone else makes there are not."""
    if not _NAME.fullmatch(name):
        raise StoreError(f"the role name '{name}' must be lower-case letters, digits and _ (e.g. {DEFAULT_READER})")
    quoted_schema, quoted_db = _quoted(schema), _quoted(database)
    later = (
        []
        if owner is None
        else [
            f"ALTER DEFAULT PRIVILEGES FOR ROLE {_quoted(owner)} IN SCHEMA {quoted_schema} "
            f"GRANT SELECT ON TABLES TO {name}"
        ]
    )
    return [
        f"CREATE ROLE {name} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT",
        *(f"ALTER ROLE {name} SET {setting} = '{value}'" for setting, value in READER_SETTINGS.items()),
        f"GRANT CONNECT ON DATABASE {quoted_db} TO {name}",
        f"GRANT USAGE ON SCHEMA {quoted_schema} TO {name}",
        *(f"GRANT SELECT ON {quoted_schema}.{relation} TO {name}" for relation in relations()),
        *later,
    ]


def _quoted(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def reader_statements(store: Any, name: str) -> list[str]:
    """``role_sql`` for the PostgreSQL store ``store``: its database, the schema and owner of its
    tables. A superuser owner gets no default privileges: what it makes later in the schema need
    not be the store's (run tracker reader-role again after an upgrade)."""
    if store.dialect != "postgresql":
        raise StoreError(
            "tracker reader-role is for a PostgreSQL store (--db postgresql://...); "
            "tracker sql reads a SQLite file through a read-only connection already"
        )
    with store.engine.connect() as conn:
        database, schema, owner, superuser = conn.exec_driver_sql(
            "SELECT current_database(), n.nspname, o.rolname, o.rolsuper FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_roles o ON o.oid = c.relowner "
            "WHERE c.oid = to_regclass('run')"
        ).one()
    return role_sql(name, schema, database, None if superuser else owner)


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
        raise StoreError(
            f"cannot make the role {name} as {store.where}'s role: {message} (run tracker "
            "reader-role without --apply and give its SQL to a superuser)"
        ) from None
