"""Writing many rows fast: the one bulk insert that launches, counters and rollups go through."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection


def bulk_insert(conn: Connection, table, rows: Sequence[dict], **shared: Any) -> None:
    """``rows`` (dicts of column values; a missing column is NULL) into ``table`` through the driver
    itself, in one executemany (SQLite) or one COPY (PostgreSQL): SQLAlchemy's per-row processing
    costs several times what the database's insert does. ``shared``: the columns every row has the
    same value in (its run), given once rather than copied into each row. For plain columns only
    (numbers, strings): nothing is converted on the way."""
    if not rows:
        return
    own = [column.name for column in table.columns if column.name not in shared]
    columns, fixed = [*shared, *own], tuple(shared.values())
    values = [fixed + tuple(map(row.get, own)) for row in rows]
    if conn.dialect.name == "postgresql":  # COPY: several times executemany's rate
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        with cursor.copy(f"COPY {table.name} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in values:
                copy.write_row(row)
        return
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    conn.exec_driver_sql(
        f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES ({', '.join([mark] * len(columns))})", values
    )
