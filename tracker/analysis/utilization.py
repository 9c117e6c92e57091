"""How busy the GPU is per layer and phase: occupancy, IPC, issue slots, pipes (paper 003 Figure 12)
and each memory level's share of its peak (Figure 17)."""

from __future__ import annotations

import pandas as pd

from tracker.analysis import in_layer_order, view
from tracker.store import Store

PIPES = {"fma_pipe_pct": "FMA", "alu_pipe_pct": "ALU", "lsu_pipe_pct": "LSU", "xu_pipe_pct": "XU"}


def utilization(store: Store, run_id: int) -> pd.DataFrame:
    return view(store, "utilization", run_id)


def pipes(store: Store, run_id: int) -> pd.DataFrame:
    """Long form: per layer, phase and pipe (FMA, ALU, LSU, XU), its utilization in percent."""
    wide = utilization(store, run_id)
    long = wide.melt(id_vars=["layer_id", "layer", "phase"], value_vars=list(PIPES), var_name="metric",
                     value_name="pct").dropna(subset=["pct"])
    return in_layer_order(long.assign(pipe=long["metric"].map(PIPES)).drop(columns="metric"))
