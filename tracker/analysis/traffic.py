"""Traffic per memory level: requests, bytes, throughput and % of peak per layer and phase
(paper 003 Figures 15/16/17)."""

from __future__ import annotations

import pandas as pd

from tracker.analysis import in_layer_order, view
from tracker.store import Store

# level -> (transactions column, bytes column, bytes/s column, % of peak column)
LEVELS = {
    "L1/TEX": ("l1_global_load_sectors", "l1_bytes", "l1_bytes_per_s", "l1_throughput_pct"),
    "shared": ("shared_load_wavefronts", "shared_bytes", "shared_bytes_per_s", "shared_throughput_pct"),
    "L2": ("l2_read_sectors", "l2_bytes", "l2_bytes_per_s", "l2_throughput_pct"),
    "DRAM": ("dram_read_sectors", "dram_bytes", "dram_bytes_per_s", "dram_throughput_pct"),
}


def traffic(store: Store, run_id: int) -> pd.DataFrame:
    """The memory_traffic view, plus dram_bytes (read + write)."""
    wide = view(store, "memory_traffic", run_id)
    return wide.assign(dram_bytes=wide["dram_read_bytes"] + wide["dram_write_bytes"])


def by_level(store: Store, run_id: int) -> pd.DataFrame:
    """Long form: per layer, phase and level: transactions (sectors or wavefronts read), bytes,
    bytes_per_s and pct_of_peak; rows with none of them collected are left out."""
    wide = traffic(store, run_id)
    parts = []
    for level, (transactions, nbytes, rate, pct) in LEVELS.items():
        part = wide[["layer_id", "layer", "phase"]].assign(
            level=level,
            transactions=wide[transactions],
            bytes=wide[nbytes],
            bytes_per_s=wide[rate],
            pct_of_peak=wide[pct],
        )
        parts.append(part)
    long = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    values = ["transactions", "bytes", "bytes_per_s", "pct_of_peak"]
    return in_layer_order(long.dropna(subset=values, how="all"))
