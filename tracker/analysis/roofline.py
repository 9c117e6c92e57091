"""The hierarchical roofline: each layer phase's achieved FLOP/s against its arithmetic intensity at
L1, L2 and DRAM, with the device's peaks as ncu measured them (paper 000; ncu's roofline)."""

from __future__ import annotations

import pandas as pd

from tracker.analysis import in_layer_order, view
from tracker.store import Store

LEVELS = {"L1": ("l1_intensity", "l1_peak_bytes_per_s"), "L2": ("l2_intensity", "l2_peak_bytes_per_s"),
          "DRAM": ("dram_intensity", "dram_peak_bytes_per_s")}


def points(store: Store, run_id: int) -> pd.DataFrame:
    """Long form: per layer, phase and level: intensity (FLOP/byte) and flops_per_s; rows without
    an intensity are left out."""
    wide = view(store, "roofline", run_id)
    parts = [wide[["layer_id", "layer", "phase", "flops_per_s"]].assign(level=level, intensity=wide[column])
             for level, (column, _) in LEVELS.items()]
    long = pd.concat(parts, ignore_index=True)
    return in_layer_order(long.dropna(subset=["intensity", "flops_per_s"]))


def peaks(store: Store, run_id: int) -> dict:
    """The run's peaks (median over its layer phases, as ncu measured them with the clocks of the
    run): flops_per_s and bytes_per_s per level; None where not collected."""
    wide = view(store, "roofline", run_id)
    median = lambda column: float(wide[column].median()) if wide[column].notna().any() else None  # noqa: E731
    return {"flops_per_s": median("peak_flops_per_s"),
            **{level: median(column) for level, (_, column) in LEVELS.items()}}
