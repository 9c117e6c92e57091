"""The trace store: SQLAlchemy 2 ORM over SQLite (default) or PostgreSQL (by URL).

Names load on first use, so that reading a SQLite store (``tracker runs``, ``show``, ``sql``,
``experiments``) imports no SQLAlchemy: it reads through ``sqlite3`` (``Store.rows``); writing,
the ORM and PostgreSQL import it.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module of tracker.store that defines it
_PUBLIC = {
    "DEFAULT_DB": "db",
    "Store": "db",
    "open_store": "db",
    "resolve": "db",
    "SCHEMA_VERSION": "lifecycle",
    "effective_status": "states",
    "experiment_dict": "queries",
    "experiment_ids": "queries",
    "find_experiment": "queries",
    "find_run": "queries",
    "launch_count": "queries",
    "launch_rows": "queries",
    "layer_rows": "queries",
    "list_runs": "queries",
    "metric_rows": "queries",
    "run_dict": "queries",
    "why_empty": "queries",
    "recording_experiment": "experiments",
    "RunWriter": "runs",
    "recording": "runs",
    "query": "sql",
    "run_sql": "sql",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'tracker.store' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tracker.store.{_PUBLIC[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
