"""Verification records: which GPU last checked each kernel variant against the reference.

``tracker selftest --record`` writes one JSON file per run under ``tests/data/verified/``:
``{"gpu": ..., "driver": ..., "cuda": ..., "date": "YYYY-MM-DD",
"variants": {"conv/fwd/shared": {"source_hash": ..., "passed": true, "errors": {"ca": 1e-7, "cg": ...}}}}``.
Records are committed; ``tracker kernels`` reads them to say where each variant was verified and
whether its source changed since.
"""

from __future__ import annotations

import json
from pathlib import Path

from tracker.gpu.kernels import Variant, source_hash

RECORD_DIR = Path(__file__).resolve().parents[2] / "tests" / "data" / "verified"


def records(directory: Path = RECORD_DIR) -> list[dict]:
    """Every record, oldest first (by date, then file name)."""
    found = [json.loads(path.read_text()) | {"file": path.name} for path in sorted(directory.glob("*.json"))]
    return sorted(found, key=lambda r: (r.get("date", ""), r["file"]))


def status(variant: Variant, history: list[dict]) -> tuple[str | None, bool | None]:
    """(GPU that last passed the variant, whether its source changed since); (None, None) if never."""
    for record in reversed(history):
        entry = record.get("variants", {}).get(variant.key)
        if entry and entry.get("passed"):
            return record["gpu"], entry.get("source_hash") != source_hash(variant.sources)
    return None, None
