"""The trace store: SQLAlchemy 2 ORM over SQLite (default) or PostgreSQL (by URL).

Importing this package imports SQLAlchemy; the CLI does so only in commands that touch a database.
"""

from tracker.store.db import DEFAULT_DB, Store, open_store, resolve
from tracker.store.experiments import experiment_dict, experiment_ids, find_experiment, recording_experiment
from tracker.store.queries import (
    find_run,
    launch_count,
    launch_rows,
    layer_rows,
    list_runs,
    metric_rows,
    run_dict,
)
from tracker.store.runs import RunWriter, effective_status, recording
from tracker.store.schema import SCHEMA_VERSION
from tracker.store.sql import query, run_sql

__all__ = [
    "DEFAULT_DB", "SCHEMA_VERSION", "RunWriter", "Store", "effective_status", "experiment_dict", "experiment_ids",
    "find_experiment", "find_run", "launch_count", "launch_rows", "layer_rows", "list_runs", "metric_rows", "open_store",
    "query", "recording", "recording_experiment", "resolve", "run_dict", "run_sql",
]
