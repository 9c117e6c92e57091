"""Verification records: which GPU last checked each kernel variant against the reference.

``tracker selftest --record`` writes one JSON file per run under ``tests/data/verified/``:
``{"gpu": ..., "driver": ..., "cuda": ..., "date": "YYYY-MM-DD",
"variants": {"conv/fwd/shared": {"source_hash": ..., "sources": {"conv2d.cu": ..., "common.cuh": ...,
"-D sizes": ...}, "passed": true, "errors": {"ca": 1e-7, "cg": ...},
"layers": {"conv3": {"ca": {"max": 3e-7, "mean": 4e-8}, ...}}}}}`` (``source_hash``: the digest of
every file the variant compiles from and the -D sizes they read, ``sources`` the same one by one;
``errors``: the worst ||out - ref|| / ||ref|| per L1 policy; ``layers``: per layer and policy the
largest and the mean difference relative to the reference's largest and mean magnitude, worst over
the phase's outputs; older records may lack ``layers`` and ``sources``).
Records are committed; ``tracker kernels`` reads them to say where each variant was verified and
what changed in its sources since.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from tracker.gpu.kernels import source_digests, source_hash
from tracker.ops import OPS, PhaseLaunch

RECORD_DIR = Path(__file__).resolve().parents[2] / "tests" / "data" / "verified"


def records(directory: Path = RECORD_DIR) -> list[dict]:
    """Every record, oldest first (by date, then file name)."""
    found = [json.loads(path.read_text()) | {"file": path.name} for path in sorted(directory.glob("*.json"))]
    return sorted(found, key=lambda r: (r.get("date", ""), r["file"]))


@dataclass(frozen=True)
class Verification:
    """The newest record that passed a variant, set against its sources today."""

    gpu: str
    then: str  # the source digest the record vouches for
    now: str  # the variant's source digest today
    changed_files: tuple[str, ...] | None  # which inputs differ; None where the record names none

    def changes(self) -> str:
        """'no' where the build verified is the build today; else what changed: the files (and
        -D sizes) where the record kept their digests, the whole source digest then and now
        where it did not."""
        if self.then == self.now:
            return "no"
        if self.changed_files:
            return ", ".join(self.changed_files)
        return f"source {self.then[:7]} -> {self.now[:7]}"


def status(variant: PhaseLaunch, history: list[dict]) -> Verification | None:
    """Where ``variant`` last passed and what changed since; None if it never has."""
    for record in reversed(history):
        entry = record.get("variants", {}).get(variant.key)
        if entry and entry.get("passed"):
            return Verification(
                record["gpu"],
                entry.get("source_hash", ""),
                source_hash(variant.sources),
                _changed(entry.get("sources"), source_digests(variant.sources)),
            )
    return None


def _changed(then: dict[str, str] | None, now: dict[str, str]) -> tuple[str, ...] | None:
    """The inputs whose digest differs between a record's ``sources`` and today's (a file added
    or gone counts); None for a record that kept no ``sources``."""
    if then is None:
        return None
    return tuple(name for name in sorted({*then, *now}) if then.get(name) != now.get(name))


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
        rows = [
            r
            for r in results
            if (r["op"], r["variant"]) == (variant.op, variant.variant) and r["phase"] == variant.phase
        ]
        if rows:
            errors: dict[str, float | None] = {}
            for row in rows:
                worst = errors.get(row["l1"], 0.0)
                errors[row["l1"]] = None if row["error"] is None or worst is None else max(worst, row["error"])
            variants[variant.key] = {
                "source_hash": source_hash(variant.sources),
                "sources": source_digests(variant.sources),
                "passed": all(r["passed"] for r in rows),
                "errors": errors,
                "layers": _per_layer(rows),
            }
    today = date.today().isoformat()
    record = {
        "gpu": device["device_name"],
        "driver": device["driver_version"],
        "cuda": device["cuda_version"],
        "date": today,
        "variants": variants,
    }
    slug = re.sub(r"[^a-z0-9]+", "-", device["device_name"].lower()).strip("-")
    path = directory / f"{today}-{slug}.json"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path
