"""Analyses: pandas DataFrames from the trace store's views, one module per question.

    runtime        time per layer and phase (median, spread), beside the model's prediction
    stalls         stall breakdown and what bounds each layer (compute, memory, latency)
    caches         L1/TEX and L2 hit rates
    traffic        requests, bytes and throughput per memory level
    fp             FP32 instruction counts and FLOPs
    utilization    occupancy, IPC, pipe and per-level utilization
    roofline       hierarchical roofline points (L1, L2, DRAM) against the device's peaks
    reconcile      model FLOPs and bytes against the measured ones, as ratios; peak memory
    speedup        one run against another, per layer and phase, with noise marked
    experiments    an experiment's runs and their speedups

Every function takes an open store (``tracker.store.open_store``) and a run id, and reads the
store's views (``view``; all SQL lives in tracker/store), so a notebook and ``tracker report`` see
the same numbers as ``tracker sql``.
"""

from __future__ import annotations

import pandas as pd

from tracker.phases import ORDER as PHASE_ORDER
from tracker.store import Store
from tracker.store.queries import view_frame


def view(store: Store, name: str, run_id: int | None = None) -> pd.DataFrame:
    """A view (or table) as a DataFrame, for one run or all, in layer and phase order."""
    return in_layer_order(view_frame(store, name, run_id))


def run_row(store: Store, run_id: int) -> pd.Series:
    """One run's settings, named by its id, as the store decodes them (``run_dict``): JSON columns
    (network_options, variants, tiles) as dicts on SQLite and PostgreSQL alike, and a missing
    value None, not the NaN a column of the ``run`` table holds where other runs have one."""
    from tracker.store import find_run, run_dict

    run = find_run(store, run_id)
    row = run_dict(run)
    row.update(started_at=run.started_at, finished_at=run.finished_at)  # datetimes, to the microsecond
    return pd.Series(row, name=run_id, dtype=object)


def in_layer_order(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows by run, layer ID and phase (fwd, bwd_data, bwd_weight), as the network runs them forward."""
    keys = [k for k in ("run_id", "layer_id") if k in frame.columns]
    if "phase" in frame.columns:
        frame = frame.assign(_phase=frame["phase"].map(PHASE_ORDER))
        keys.append("_phase")
    if keys:
        frame = frame.sort_values(keys, kind="stable").reset_index(drop=True)
    return frame.drop(columns="_phase", errors="ignore")


def long_form(wide: pd.DataFrame, names: dict[str, str], value: str, kind: str) -> pd.DataFrame:
    """A wide view's ``names`` columns as rows: per layer and phase, one row per column that has a
    value, holding it in ``value`` and the column's label (``names[column]``) in ``kind``."""
    long = wide.melt(
        id_vars=["layer_id", "layer", "phase"], value_vars=list(names), var_name="metric", value_name=value
    ).dropna(subset=[value])
    return in_layer_order(long.assign(**{kind: long["metric"].map(names)}).drop(columns="metric"))


def label(frame: pd.DataFrame) -> pd.Series:
    """'conv2 bwd_weight': how figures and findings name a layer phase."""
    return frame["layer"] + " " + frame["phase"]
