"""``tracker export``: one run's views and tables as files (CSV or Parquet) for replotting elsewhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from tracker.errors import TrackerError, unknown
from tracker.extras import install
from tracker.paths import check_dir, claim, mark

if TYPE_CHECKING:  # the CLI reads FORMATS at start-up: no SQLAlchemy then
    from tracker.store import Store

TABLES = ("run", "layer", "prediction", "launch", "metric")
FORMATS = ("csv", "parquet")  # --format reads these


def export(store: Store, run_id: int, out: str | Path | None, fmt: str, force: bool = False) -> list[Path]:
    """Write ``<name>.<fmt>`` per view and table, rows of ``run_id`` only, into ``out`` (default:
    ``folder(run_id)`` in the current directory); the paths written. ``metric_def`` (the catalog,
    every run's) is written too, to read the metric names by. A folder holding another run's
    export, or other files, is refused unless ``force`` (tracker.paths.claim); files an earlier
    export of the same run wrote and this one does not (the other format's) are removed."""
    from tracker.analysis import view
    from tracker.store.views import VIEWS

    if fmt not in FORMATS:
        raise unknown("export format", fmt, list(FORMATS))
    out = check_dir(folder(run_id) if out is None else out)
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise TrackerError(f"parquet needs pyarrow: {install('parquet')} (or --format csv)") from None
    what = f"run {run_id}'s export"
    earlier = claim(out, what, store.where, force)
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
    for path in set(earlier) - set(written):
        path.unlink()
    mark(out, what, store.where, written)
    return written


def folder(run_id: int) -> str:
    """A run's export's own folder, the default --out: export-1."""
    return f"export-{run_id}"


def _json_cells(column):
    """Lists and dicts (shapes, variant maps) as JSON text: Parquet columns hold one type."""
    if column.dtype != object:
        return column
    return column.map(lambda v: json.dumps(v) if isinstance(v, (list, dict)) else v)
