"""Whether two runs' counters agree, launch by launch: one workload counted by two collectors (CUPTI
against ncu), or twice by one, which says how far a metric moves from run to run at all.

Each metric of the catalog that both runs hold is compared on every launch both counted, as the
relative difference |a - b| / max(|a|, |b|, 0.1 % of the metric's largest value over the launches:
``FLOOR``) (0 where all are 0). A count's totals over the launches are compared too. A count (instructions, sectors,
bytes: the metrics whose per-layer rollup is a sum) agrees within 5 %; a rate, ratio, clock or time
within 10 %. The launches must be the same: the same kernel at each invocation.
"""

from __future__ import annotations

import pandas as pd

from tracker.analysis import view
from tracker.errors import TrackerError
from tracker.metrics import BY_NAME
from tracker.store import Store

TOLERANCE = {"count": 0.05, "rate": 0.10}
# A difference is relative to the larger value, or to this share of the metric's largest value over the
# launches compared, whichever is more: two ncu runs of one workload on an H100 count 0 and 1 bank
# conflicts in a launch where another has 10^5 (tests/test_agreement.py)
FLOOR = 0.001
SKIPPED_FAMILIES = ("profiler",)  # replay passes: each collector's own, nothing to agree on
COLUMNS = (
    "metric",
    "kind",
    "launches",
    "tolerance",
    "within",
    "median_diff",
    "worst_diff",
    "worst_at",
    "a_at_worst",
    "b_at_worst",
    "agrees",
    "total_diff",
)


def kind(metric: str) -> str:
    """count (its rollup a sum, not a time) or rate (ratios, rates, clocks, times)."""
    found = BY_NAME[metric]
    return "count" if found.rollup == "sum" and found.family != "time" else "rate"


def agreement(store: Store, run_a: int, run_b: int, store_b: Store | None = None) -> pd.DataFrame:
    """Per metric both runs hold: the launches compared, the share within tolerance, the median and
    worst relative difference, the launch and values at the worst, and whether every launch agrees.
    ``store_b``: RUN_B's store, where it is not ``store``."""
    a, b = _counted(store, run_a), _counted(store_b or store, run_b)
    both = a.merge(b, on="invocation", suffixes=("_a", "_b"))
    if both.empty:
        raise TrackerError(
            f"runs {run_a} and {run_b} have no counted launch in common: profile both with a "
            "collector (ncu, nvprof, cupti)"
        )
    differ = both[both["kernel_name_a"] != both["kernel_name_b"]]
    if not differ.empty:
        first = differ.iloc[0]
        raise TrackerError(
            f"runs {run_a} and {run_b} launch different kernels at invocation {first['invocation']} "
            f"({first['kernel_name_a']} and {first['kernel_name_b']}): their counters cannot be paired"
        )
    rows = [
        _metric(both, name)
        for name in BY_NAME
        if BY_NAME[name].family not in SKIPPED_FAMILIES
        and f"{name}_a" in both
        and both[[f"{name}_a", f"{name}_b"]].notna().all(axis=1).any()
    ]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _counted(store: Store, run_id: int) -> pd.DataFrame:
    frame = view(store, "launch_metrics", run_id)
    frame["at"] = frame["layer"] + "/" + frame["phase"] + " #" + frame["invocation"].astype(str)
    return frame.drop(columns=["run_id"])


def _metric(both: pd.DataFrame, name: str) -> dict:
    pair = both[[f"{name}_a", f"{name}_b", "at_a"]].dropna(subset=[f"{name}_a", f"{name}_b"])
    x, y = pair[f"{name}_a"].astype(float), pair[f"{name}_b"].astype(float)
    larger = pd.concat([x.abs(), y.abs()], axis=1).max(axis=1)
    scale = larger.clip(lower=FLOOR * larger.max())  # a launch where the metric is next to nothing: its noise
    diff = ((x - y).abs() / scale.where(scale > 0)).fillna(0.0)
    worst = diff.idxmax()
    metric_kind = kind(name)
    tolerance = TOLERANCE[metric_kind]
    return dict(
        metric=name,
        kind=metric_kind,
        launches=len(pair),
        tolerance=tolerance,
        within=float((diff <= tolerance).mean()),
        median_diff=float(diff.median()),
        worst_diff=float(diff[worst]),
        worst_at=pair.loc[worst, "at_a"],
        a_at_worst=float(x[worst]),
        b_at_worst=float(y[worst]),
        agrees=bool((diff <= tolerance).all()),
        total_diff=_relative(x.sum(), y.sum()) if metric_kind == "count" else None,
    )


def _relative(a: float, b: float) -> float:
    larger = max(abs(a), abs(b))
    return abs(a - b) / larger if larger else 0.0
