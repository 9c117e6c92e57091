"""Runtime per layer and phase: the median over measured iterations, its spread, and the model's
prediction beside it (paper 003 Figures 6/7). A model-backend run has predictions only."""

from __future__ import annotations

import pandas as pd

from tracker.analysis import in_layer_order, view
from tracker.phases import PHASE_SETS
from tracker.store import Store
from tracker.store.rollups import over_repeats


def runtime(store: Store, run_id: int) -> pd.DataFrame:
    """Per layer and phase: median_ms, min_ms, max_ms, spread_pct ((max - min) / median), repeats,
    launches, the algorithm its kernels ran, predicted_ms, ops, bytes, and ``ms``: the median of a
    measured run (0 for a layer phase that launched nothing), the prediction of a model run, with
    ``source`` saying which."""
    layers = view(store, "layer_phase", run_id)[
        ["run_id", "layer_id", "layer", "kind", "phase", "ops", "bytes", "predicted_ms", "bound"]
    ]
    times = view(store, "layer_time", run_id).rename(columns={"measured_ms": "median_ms"})[
        ["layer_id", "phase", "median_ms", "min_ms", "max_ms", "repeats", "launches", "spread_pct", "algorithm"]
    ]
    frame = layers.merge(times, on=["layer_id", "phase"], how="left")
    if times["median_ms"].isna().all():  # a model run, or launches never timed: predictions are all there is
        frame["ms"] = frame["predicted_ms"]
        frame["source"] = frame["ms"].notna().map({True: "model", False: None})
    else:  # a layer phase that launched nothing (a ReLU fused into the conv before it) took no time
        frame[["median_ms", "min_ms", "max_ms", "launches"]] = frame[
            ["median_ms", "min_ms", "max_ms", "launches"]
        ].fillna(0)
        frame["ms"], frame["source"] = frame["median_ms"], "measured"
    return in_layer_order(frame)


def iteration(store: Store, run_id: int, phases: str = "both") -> dict:
    """The whole fwd+bwd iteration (or its ``phases``: fwd, bwd): median, min and max over measured
    iterations of the summed kernel time, or the model's total where nothing was measured."""
    wanted = list(PHASE_SETS[phases])
    times = view(store, "layer_time_repeat", run_id)
    times = times[times["phase"].isin(wanted)]
    stats = over_repeats(times.groupby("repeat")["measured_ms"].sum()) if not times.empty else None
    if stats:
        return {
            "ms": stats.median,
            "min_ms": stats.min,
            "max_ms": stats.max,
            "spread_pct": stats.spread_pct,
            "repeats": stats.repeats,
            "source": "measured",
        }
    layers = view(store, "layer_phase", run_id)
    predicted = layers[layers["phase"].isin(wanted)]["predicted_ms"]
    total = float(predicted.sum()) if predicted.notna().any() else None
    return {
        "ms": total,
        "min_ms": total,
        "max_ms": total,
        "spread_pct": None,
        "repeats": 0,
        "source": "model" if total is not None else None,
    }
