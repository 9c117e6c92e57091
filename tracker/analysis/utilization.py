"""How busy the GPU is per layer and phase: occupancy, IPC, issue slots, pipes (paper 003 Figure 12)
and each memory level's share of its peak (Figure 17)."""

from __future__ import annotations

import pandas as pd

from tracker.analysis import long_form, view
from tracker.store import Store

PIPES = {"fma_pipe_pct": "FMA", "alu_pipe_pct": "ALU", "lsu_pipe_pct": "LSU", "xu_pipe_pct": "XU"}


def utilization(store: Store, run_id: int) -> pd.DataFrame:
    return view(store, "utilization", run_id)


def pipes(store: Store, run_id: int) -> pd.DataFrame:
    """Long form: per layer, phase and pipe (FMA, ALU, LSU, XU), its utilization in percent."""
    return long_form(utilization(store, run_id), PIPES, "pct", "pipe")
