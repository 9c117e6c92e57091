"""Render the documented SQL contract, ``schema/schema.sql`` and ``schema/views.sql``, from the ORM.

``python -m tracker.store.contract`` rewrites both files; a test fails when they are stale, and
another proves that running them creates the same database as the ORM does.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sqlalchemy.dialects import sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

from tracker.store import views
from tracker.store.lifecycle import SCHEMA_VERSION
from tracker.store.schema import Base

ROOT = Path(__file__).resolve().parents[2] / "schema"
HEADER = """-- tracker trace store, schema v{version}: {what}
-- Rendered from tracker/store/{source} by `python -m tracker.store.contract`; do not edit by hand.
-- {note}
"""


def _comment(text: str) -> str:
    return "".join(f"-- {line}\n" for line in text.strip().splitlines())


def _ddl(element) -> str:
    text = str(element.compile(dialect=sqlite.dialect())).strip().replace("\t", "    ")
    return "\n".join(line.rstrip() for line in text.splitlines()) + ";\n"


def schema_sql() -> str:
    parts = [
        HEADER.format(
            version=SCHEMA_VERSION,
            what="tables",
            source="schema.py",
            note="SQLite dialect; the same ORM creates the equivalent tables on PostgreSQL.",
        )
    ]
    for table in Base.metadata.sorted_tables:
        model = next((m.class_ for m in Base.registry.mappers if m.local_table is table), None)
        docs = [f"  {c.name}: {c.doc}" for c in table.columns if c.doc]
        about = model.__doc__ if model else table.comment  # a Table without a class carries a comment
        block = _comment("\n".join([about or "", *docs])) + _ddl(CreateTable(table))
        block += "".join(_ddl(CreateIndex(index)) for index in sorted(table.indexes, key=lambda i: str(i.name)))
        parts.append(block)
    return "\n".join(parts)


def views_sql() -> str:
    parts = [
        HEADER.format(
            version=SCHEMA_VERSION,
            what="views",
            source="views.py",
            note="Portable SQL: the same views run on SQLite and PostgreSQL.",
        )
    ]
    parts += [_comment(view.doc) + view.create() + ";\n" for view in views.VIEWS]
    return "\n".join(parts)


def write() -> None:
    (ROOT / "schema.sql").write_text(schema_sql())
    (ROOT / "views.sql").write_text(views_sql())


if __name__ == "__main__":
    write()
    sys.stdout.write(f"wrote {ROOT}/schema.sql and views.sql\n")
