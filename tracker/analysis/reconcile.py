"""Reconciliation: what the model says a layer must do against what the GPU did, as ratios.

``flops_ratio`` = SASS FLOPs / model ops (above 1: wasted or redundant arithmetic, e.g. padding or
recomputation); ``dram_ratio``, ``l2_ratio``, ``l1_ratio`` = bytes moved at that level / the
model's compulsory bytes (above 1: excess traffic). Peak memory: measured high-water mark against
the model's (paper 002), as the run recorded them (tracker.model.memory.PeakMemory)."""

from __future__ import annotations

import pandas as pd

from tracker.analysis import in_layer_order, view
from tracker.model.memory import PeakMemory
from tracker.store import Store


def _ratio(num: pd.Series, den: pd.Series) -> pd.Series:
    return num / den.where(den > 0)


def reconcile(store: Store, run_id: int) -> pd.DataFrame:
    s = view(store, "layer_summary", run_id)
    frame = s[
        [
            "run_id",
            "layer_id",
            "layer",
            "kind",
            "phase",
            "model_ops",
            "flops",
            "model_bytes",
            "dram_bytes",
            "l2_bytes",
            "l1_bytes",
        ]
    ].copy()
    frame["flops_ratio"] = _ratio(frame["flops"], frame["model_ops"])
    for level in ("dram", "l2", "l1"):
        frame[f"{level}_ratio"] = _ratio(frame[f"{level}_bytes"], frame["model_bytes"])
    return in_layer_order(frame)


def peak_memory(store: Store, run_id: int) -> PeakMemory:
    """The run's peak memory: what show, the report and the notebooks print."""
    run = view(store, "run_summary", run_id).iloc[0]
    return PeakMemory.of(run["predicted_peak_bytes"], run["measured_peak_bytes"])
