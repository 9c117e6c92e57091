"""FP32 instructions per layer and phase (paper 003 Figure 9): adds, multiplies and FMAs, the FLOPs
they make (fadd + fmul + 2 ffma) and the rate achieved."""

from __future__ import annotations

import pandas as pd

from tracker.analysis import long_form, view
from tracker.store import Store

KINDS = {"fadd": "add", "fmul": "multiply", "ffma": "fma"}


def fp_instructions(store: Store, run_id: int) -> pd.DataFrame:
    return view(store, "fp_instructions", run_id)


def by_kind(store: Store, run_id: int) -> pd.DataFrame:
    """Long form: per layer, phase and instruction kind (add, multiply, fma), the thread instructions."""
    return long_form(fp_instructions(store, run_id), KINDS, "instructions", "instruction")
