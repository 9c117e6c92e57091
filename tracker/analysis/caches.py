"""What the caches do: L1/TEX and L2 hit rates per layer and phase (paper 003 Figures 13/14)."""

from __future__ import annotations

import pandas as pd

from tracker.analysis import in_layer_order, view
from tracker.store import Store

LEVELS = {"l1_hit_rate": "L1/TEX", "l2_hit_rate": "L2"}


def hit_rates(store: Store, run_id: int) -> pd.DataFrame:
    """The cache_hit_rate view (percent; L1 and L2 overall, global loads, L2 reads and writes)."""
    return view(store, "cache_hit_rate", run_id)


def by_level(store: Store, run_id: int) -> pd.DataFrame:
    """Long form: one row per layer, phase and cache level with its hit rate (percent)."""
    wide = hit_rates(store, run_id)
    long = wide.melt(id_vars=["layer_id", "layer", "phase"], value_vars=list(LEVELS), var_name="metric",
                     value_name="hit_rate_pct").dropna(subset=["hit_rate_pct"])
    return in_layer_order(long.assign(level=long["metric"].map(LEVELS)).drop(columns="metric"))
