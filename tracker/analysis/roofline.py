"""The hierarchical roofline: each layer phase's achieved FLOP/s against its arithmetic intensity at
L1, L2 and DRAM, with the device's peaks as ncu measured them (paper 000; ncu's roofline), or the
catalog's; for a run without counters, the model's FLOPs and bytes over the measured or predicted time."""

from __future__ import annotations

import pandas as pd

from tracker.analysis import in_layer_order, run_row, view
from tracker.analysis.runtime import runtime
from tracker.errors import TrackerError
from tracker.model import lookup
from tracker.model.roofline import ROOF_LEVELS, Roofs
from tracker.store import Store

LEVELS = {
    "L1": ("l1_intensity", "l1_peak_bytes_per_s"),
    "L2": ("l2_intensity", "l2_peak_bytes_per_s"),
    "DRAM": ("dram_intensity", "dram_peak_bytes_per_s"),
}


def points(store: Store, run_id: int) -> pd.DataFrame:
    """Long form: per layer, phase and level: intensity (FLOP/byte) and flops_per_s; rows without
    an intensity are left out."""
    wide = view(store, "roofline", run_id)
    parts = [
        wide[["layer_id", "layer", "phase", "flops_per_s"]].assign(level=level, intensity=wide[column])
        for level, (column, _) in LEVELS.items()
    ]
    long = pd.concat(parts, ignore_index=True)
    return in_layer_order(long.dropna(subset=["intensity", "flops_per_s"]))


def peaks(store: Store, run_id: int) -> dict:
    """The run's peaks (median over its layer phases, as ncu measured them with the clocks of the
    run): flops_per_s and bytes_per_s per level; None where not collected."""
    wide = view(store, "roofline", run_id)
    median = lambda column: float(wide[column].median()) if wide[column].notna().any() else None  # noqa: E731
    return {
        "flops_per_s": median("peak_flops_per_s"),
        **{level: median(column) for level, (_, column) in LEVELS.items()},
    }


def roofs(store: Store, run_id: int) -> Roofs | None:
    """The run's roofs: ncu's measured peaks where it has them, the catalog's for its device for
    the levels ncu did not give (L1 on sm_90); None for a model run without a device."""
    run = run_row(store, run_id)  # device_name None, not NaN, for a model run without a device
    try:
        catalog = Roofs.of(lookup(run["device_name"])) if run["device_name"] else None
    except TrackerError:
        catalog = None
    measured = peaks(store, run_id)
    if not measured["flops_per_s"]:
        return catalog
    clock_control = (run["collector_settings"] or {}).get("clock_control")
    clocks = f"{run['backend']}, {clock_control} clocks" if clock_control else run["backend"]
    levels = {level: measured[level] for level in ROOF_LEVELS if measured.get(level)}
    found = Roofs(measured["flops_per_s"], levels, {key: clocks for key in ("FP32", *levels)}, run["device_name"])
    return found.merged(catalog) if catalog else found


def chart(store: Store, run_id: int) -> tuple[pd.DataFrame, str]:
    """The run's roofline points and their basis: ncu's per level ('counters'); else the model's
    FLOPs and compulsory bytes over the measured time ('time'); else the model's attainable
    FLOP/s ('predicted'). Layer phases that launched nothing or do no arithmetic are left out, and
    named in ``attrs['left_out']`` (layer, phase), for the note every roofline prints."""
    every = runtime(store, run_id)
    found, basis = points(store, run_id), "counters"
    if found.empty:
        frame = every[(every["ops"] > 0) & (every["bytes"] > 0) & (every["ms"] > 0)]
        basis = "time" if (frame["source"] == "measured").any() else "predicted"
        found = frame.assign(
            level="compulsory", intensity=frame["ops"] / frame["bytes"], flops_per_s=frame["ops"] / (frame["ms"] / 1e3)
        )[["layer_id", "layer", "phase", "level", "intensity", "flops_per_s"]].reset_index(drop=True)
    shown = set(zip(found["layer"], found["phase"]))
    found.attrs["left_out"] = [
        (layer, phase) for layer, phase in zip(every["layer"], every["phase"]) if (layer, phase) not in shown
    ]
    return found, basis


def efficiency(store: Store, run_id: int) -> pd.DataFrame:
    """Paper 001's per-layer figure: per layer phase that took time, its ``ms``, its share of the
    step's kernel time (``share_pct``, summing to 100), the FLOP/s it achieved (the model's FLOPs
    over that time) and that as a share of the device's FP32 peak (``peak_pct``; None without a
    device). ``source``: measured or the model's prediction."""
    frame = runtime(store, run_id)
    frame = frame[frame["ms"] > 0]
    peak = roofs(store, run_id)
    flops = frame["ops"] / (frame["ms"] / 1e3)
    return frame.assign(
        share_pct=100 * frame["ms"] / frame["ms"].sum(),
        flops_per_s=flops,
        peak_pct=100 * flops / peak.flops_per_s if peak else None,
    )[["layer_id", "layer", "phase", "ms", "share_pct", "flops_per_s", "peak_pct", "source"]].reset_index(drop=True)


def moves(store: Store, run_a: int, run_b: int) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Run B's points, and per layer phase the move from run A's point to run B's at the level both
    share (DRAM with counters, the compulsory bytes without): x0, y0 -> x1, y1."""
    (a, basis_a), (b, basis_b) = chart(store, run_a), chart(store, run_b)
    basis = basis_a if basis_a == basis_b else "time"
    level = "DRAM" if basis == "counters" else "compulsory"
    a, b = (frame[frame["level"] == level] for frame in (a, b))
    joined = a.merge(b, on=["layer_id", "layer", "phase"], suffixes=("_a", "_b"))
    arrows = joined.rename(
        columns={"intensity_a": "x0", "flops_per_s_a": "y0", "intensity_b": "x1", "flops_per_s_b": "y1"}
    )[["layer", "phase", "x0", "y0", "x1", "y1"]]
    return b, arrows, basis
