"""Verification records: which GPU last checked each kernel variant against the reference.

``tracker selftest --record`` writes one JSON file per run under ``tests/data/verified/``:
``{"gpu": ..., "driver": ..., "cuda": ..., "date": "YYYY-MM-DD",
"variants": {"conv/fwd/shared": {"source_hash": ..., "passed": true, "errors": {"ca": 1e-7, "cg": ...},
"layers": {"conv3": {"ca": {"max": 3e-7, "mean": 4e-8}, ...}}}}}`` (``errors``: the worst
||out - ref|| / ||ref|| per L1 policy; ``layers``: per layer and policy the largest and the mean
difference relative to the reference's largest and mean magnitude, worst over the phase's
outputs; records before issue 30 have no ``layers``).
Records are committed; ``tracker kernels`` reads them to say where each variant was verified and
whether its source changed since.
"""

from __future__ import annotations

import json
import re
from datetime import date
from pathlib import Path

from tracker.gpu.kernels import source_hash
from tracker.ops import OPS, Launch

RECORD_DIR = Path(__file__).resolve().parents[2] / "tests" / "data" / "verified"


def records(directory: Path = RECORD_DIR) -> list[dict]:
    """Every record, oldest first (by date, then file name)."""
    found = [json.loads(path.read_text()) | {"file": path.name} for path in sorted(directory.glob("*.json"))]
    return sorted(found, key=lambda r: (r.get("date", ""), r["file"]))


def status(variant: Launch, history: list[dict]) -> tuple[str | None, bool | None]:
    """(GPU that last passed the variant, whether its source changed since); (None, None) if never."""
    for record in reversed(history):
        entry = record.get("variants", {}).get(variant.key)
        if entry and entry.get("passed"):
            return record["gpu"], entry.get("source_hash") != source_hash(variant.sources)
    return None, None


def layer_error(history: list[dict], gpu: str | None, key: str, layer: str, policy: str = "ca") -> dict | None:
    """The newest record's {"max", "mean"} error of variant ``key`` ('conv/fwd/winograd') at
    ``layer`` under ``policy`` on ``gpu``, or None where no record of that GPU holds one."""
    for record in reversed(history):
        if record.get("gpu") == gpu:
            entry = record.get("variants", {}).get(key, {}).get("layers", {}).get(layer, {}).get(policy)
            if entry:
                return entry
    return None


def _per_layer(rows: list[dict]) -> dict:
    """layer -> L1 policy -> the worst max and mean error over the phase's outputs (None: never written)."""
    layers: dict[str, dict] = {}
    for row in rows:
        entry = layers.setdefault(row["layer"], {}).setdefault(row["l1"], {"max": 0.0, "mean": 0.0})
        for key in ("max", "mean"):
            value = row.get(f"{key}_error")
            entry[key] = None if value is None or entry[key] is None else max(entry[key], value)
    return layers


def write_record(results: list[dict], device: dict, directory: Path = RECORD_DIR) -> Path:
    """Write a record of one selftest (rows of ``runner.summarize``); returns its path."""
    variants: dict[str, dict] = {}
    for variant in OPS.launches():
        rows = [r for r in results if (r["op"], r["variant"]) == (variant.op, variant.variant)
                and r["phase"] == variant.phase]
        if rows:
            errors: dict[str, float | None] = {}
            for row in rows:
                worst = errors.get(row["l1"], 0.0)
                errors[row["l1"]] = None if row["error"] is None or worst is None else max(worst, row["error"])
            variants[variant.key] = {"source_hash": source_hash(variant.sources),
                                     "passed": all(r["passed"] for r in rows), "errors": errors,
                                     "layers": _per_layer(rows)}
    today = date.today().isoformat()
    record = {"gpu": device["device_name"], "driver": device["driver_version"], "cuda": device["cuda_version"],
              "date": today, "variants": variants}
    slug = re.sub(r"[^a-z0-9]+", "-", device["device_name"].lower()).strip("-")
    path = directory / f"{today}-{slug}.json"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path
