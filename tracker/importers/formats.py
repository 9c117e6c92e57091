"""The files ``tracker import`` reads, by suffix, and the reader of each."""

from __future__ import annotations

import importlib
from pathlib import Path

from tracker.errors import TrackerError
from tracker.importers.base import Imported

FORMATS = {  # suffix -> reader module (its ``read(path)``)
    ".ncu-rep": "tracker.importers.ncu_rep",
    ".json": "tracker.importers.torch_trace",
    ".json.gz": "tracker.importers.torch_trace",
    ".sqlite": "tracker.importers.nsys_sqlite",
    ".csv": "tracker.importers.ncu_page",
}


def read(path: str | Path) -> Imported:
    """The profile in ``path``; a file of no known kind, or one its reader cannot read, is refused in one line."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise TrackerError(f"cannot import {path}: no such file")
    kind = next((suffix for suffix in FORMATS if file.name.lower().endswith(suffix)), None)
    if kind is None:
        raise TrackerError(f"cannot import {path}: tracker reads {', '.join(FORMATS)} files")
    imported: Imported = importlib.import_module(FORMATS[kind]).read(file)
    return imported
