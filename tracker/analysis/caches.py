"""What the caches do: L1/TEX and L2 hit rates per layer and phase (paper 003 Figures 13/14)."""

from __future__ import annotations

import pandas as pd

from tracker.analysis import long_form, view
from tracker.store import Store

LEVELS = {"l1_hit_rate": "L1/TEX", "l2_hit_rate": "L2"}


def hit_rates(store: Store, run_id: int) -> pd.DataFrame:
    """The cache_hit_rate view (percent; L1 and L2 overall, global loads, L2 reads and writes)."""
    return view(store, "cache_hit_rate", run_id)


def by_level(store: Store, run_id: int) -> pd.DataFrame:
    """Long form: one row per layer, phase and cache level with its hit rate (percent)."""
    return long_form(hit_rates(store, run_id), LEVELS, "hit_rate_pct", "level")
