"""The ``tuning`` table: every candidate tile ``tracker tune`` measured, and the fastest verified
one of a variant at a layer phase's shape on a GPU (``tracker.tune.best`` races the variants)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import insert, inspect, select

from tracker.store.db import Store
from tracker.store.schema import Base, Tuning

Key = tuple[str, str, str, str]  # op, variant, phase, shape


def add_candidates(store: Store, rows: list[dict]) -> None:
    """Add the rows, creating the table in a database made before it existed."""
    with store.begin() as conn:
        Base.metadata.create_all(conn, tables=[Tuning.__table__], checkfirst=True)  # type: ignore[list-item]
        if rows:
            conn.execute(insert(Tuning), rows)


def fastest(store: Store, device_name: str, keys: Iterable[Key]) -> list[tuple[str, float] | None]:
    """For each key, the tile and time (ms) of its fastest verified candidate on ``device_name``
    (None: none)."""
    with store.connect() as conn:
        if not inspect(conn).has_table(Tuning.__tablename__):
            return [None for _ in keys]
        rows = [
            conn.execute(
                select(Tuning.tile, Tuning.time_ms)
                .where(
                    Tuning.device_name == device_name,
                    Tuning.op == op,
                    Tuning.variant == variant,
                    Tuning.phase == phase,
                    Tuning.shape == shape,
                    Tuning.verified.is_(True),
                    Tuning.time_ms.is_not(None),
                )
                .order_by(Tuning.time_ms, Tuning.id)
                .limit(1)
            ).first()
            for op, variant, phase, shape in keys
        ]
    return [None if row is None else (row.tile, row.time_ms) for row in rows]
