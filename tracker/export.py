"""``tracker export``: one run's views and tables as files (CSV or Parquet) for replotting elsewhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from tracker.errors import TrackerError, unknown
from tracker.extras import install
from tracker.paths import check_dir

if TYPE_CHECKING:  # the CLI reads FORMATS at start-up: no SQLAlchemy then
    from tracker.store import Store

TABLES = ("run", "layer", "prediction", "launch", "metric")
FORMATS = ("csv", "parquet")  # --format reads these


def export(store: Store, run_id: int, out: str | Path, fmt: str) -> list[Path]:
    """Write ``<name>.<fmt>`` per view and table, rows of ``run_id`` only; the paths written.
    ``metric_def`` (the catalog, every run's) is written too, to read the metric names by."""
    from tracker.analysis import view
    from tracker.store.views import VIEWS

    if fmt not in FORMATS:
        raise unknown("export format", fmt, list(FORMATS))
    out = check_dir(out)
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise TrackerError(f"parquet needs pyarrow: {install('parquet')} (or --format csv)") from None
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in (*TABLES, *(v.name for v in VIEWS), "metric_def"):
        if name == "run":
            frame = view(store, "run").query("id == @run_id")
        else:
            frame = view(store, name, None if name == "metric_def" else run_id)
        path = out / f"{name}.{fmt}"
        if fmt == "csv":
            frame.to_csv(path, index=False)
        else:
            frame.apply(_json_cells).to_parquet(path, index=False)
        written.append(path)
    return written


def _json_cells(column):
    """Lists and dicts (shapes, variant maps) as JSON text: Parquet columns hold one type."""
    if column.dtype != object:
        return column
    return column.map(lambda v: json.dumps(v) if isinstance(v, (list, dict)) else v)
