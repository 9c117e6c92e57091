"""Which algorithm ran each layer phase, and with which kernels (paper 004's question, asked of
cuDNN and cuBLAS as of our variants): read from the algorithm and role stored on each launch
(tracker/kernel_names.py names them from the kernels' names)."""

from __future__ import annotations

import pandas as pd

from tracker.analysis import in_layer_order, view
from tracker.analysis.runtime import runtime
from tracker.kernel_names import classify, kernel_base

COLUMNS = ["layer_id", "layer", "kind", "phase", "algorithm", "tensor_cores", "kernels", "launches", "ms"]


def per_phase(store, run_id: int) -> pd.DataFrame:
    """Per layer phase that ran a named algorithm (convolutions and GEMMs): the algorithm, whether
    its math ran on tensor cores, its kernels in launch order as 'name (role)', its launches per
    iteration and median time. Empty for a model run and for runs recorded before schema v6."""
    launches = view(store, "launch", run_id)
    launches = launches[launches["algorithm"].notna()] if "algorithm" in launches else launches.iloc[0:0]
    if launches.empty:
        return pd.DataFrame(columns=COLUMNS)
    first = launches[launches["repeat"] == launches["repeat"].min()].sort_values("invocation")
    rows = []
    for (layer_id, phase), group in first.groupby(["layer_id", "phase"], sort=False):
        names = list(dict.fromkeys(zip(group["kernel_name"], group["role"])))
        rows.append(
            {
                "layer_id": layer_id,
                "phase": phase,
                "algorithm": group["algorithm"].iloc[0],
                "tensor_cores": any(classify(name).tensor_cores for name, role in names if role == "math"),
                "kernels": "; ".join(f"{kernel_base(name)} ({role})" for name, role in names),
                "launches": len(group),
            }
        )
    times = runtime(store, run_id)[["layer_id", "layer", "kind", "phase", "ms"]]
    return in_layer_order(pd.DataFrame(rows).merge(times, on=["layer_id", "phase"]))[COLUMNS]
