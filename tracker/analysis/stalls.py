"""Why warps wait: the stall breakdown per layer and phase, in paper 003's categories, and what
bounds each layer (compute, memory or latency) from its dominant stalls and its throughput."""

from __future__ import annotations

import pandas as pd

from tracker.analysis import in_layer_order, view
from tracker.metrics import STALLS
from tracker.store import Store

CATEGORY = {m.name: m.category for m in STALLS}
COMPUTE = {"pipe_busy", "not_selected"}  # the pipes are busy, or another warp is issuing
MEMORY = {"memory_dependency", "memory_throttle", "texture", "constant_memory_dependency"}
BUSY_PCT = 60.0  # a unit this busy (% of peak) bounds the layer whatever the stalls say


def breakdown(store: Store, run_id: int) -> pd.DataFrame:
    """The stall_breakdown view: each reason's share, the two dominant categories and theirs."""
    return view(store, "stall_breakdown", run_id)


def by_category(store: Store, run_id: int) -> pd.DataFrame:
    """Long form: one row per layer, phase and paper-003 category with its share of all stalls."""
    wide = breakdown(store, run_id)
    reasons = [c for c in CATEGORY if c in wide.columns]
    long = wide.melt(
        id_vars=["layer_id", "layer", "phase"], value_vars=reasons, var_name="reason", value_name="share"
    ).dropna(subset=["share"])
    long["category"] = long["reason"].map(CATEGORY)
    grouped = long.groupby(["layer_id", "layer", "phase", "category"], as_index=False)["share"].sum()
    return in_layer_order(grouped)


def classify(first_reason: str | None) -> str | None:
    if first_reason is None or pd.isna(first_reason):
        return None
    return "compute" if first_reason in COMPUTE else "memory" if first_reason in MEMORY else "latency"


def bound(store: Store, run_id: int) -> pd.DataFrame:
    """Per layer and phase: ``bound`` (compute, memory or latency) and ``why``. A unit at least
    BUSY_PCT busy decides (SM vs memory throughput); otherwise the dominant stall category does;
    a run without counters gets the model's roofline verdict, said as such."""
    model = view(store, "layer_phase", run_id)[["layer_id", "layer", "kind", "phase", "bound"]]
    stalls = breakdown(store, run_id)
    use = view(store, "utilization", run_id)
    frame = model.rename(columns={"bound": "model_bound"})
    frame = (
        frame.merge(
            stalls[["layer_id", "phase", "first_reason", "first_share", "second_reason"]],
            on=["layer_id", "phase"],
            how="left",
        )
        if not stalls.empty
        else frame.assign(first_reason=None, first_share=None, second_reason=None)
    )
    frame = (
        frame.merge(
            use[["layer_id", "phase", "sm_throughput_pct", "memory_throughput_pct"]],
            on=["layer_id", "phase"],
            how="left",
        )
        if not use.empty
        else frame.assign(sm_throughput_pct=None, memory_throughput_pct=None)
    )
    verdicts = [_verdict(row) for row in frame.itertuples(index=False)]
    frame["bound"] = [v[0] for v in verdicts]
    frame["why"] = [v[1] for v in verdicts]
    return in_layer_order(frame)


def _verdict(row) -> tuple[str | None, str]:
    sm, mem = row.sm_throughput_pct, row.memory_throughput_pct
    busiest = max(
        ((sm, "compute", "SM"), (mem, "memory", "memory")), key=lambda t: -1 if t[0] is None or pd.isna(t[0]) else t[0]
    )
    if busiest[0] is not None and not pd.isna(busiest[0]) and busiest[0] >= BUSY_PCT:
        return busiest[1], f"{busiest[2]} throughput {busiest[0]:.0f}% of peak"
    verdict = classify(row.first_reason)
    if verdict:
        second = f", {row.second_reason}" if isinstance(row.second_reason, str) else ""
        return verdict, f"top stalls {row.first_reason}{second}"
    if isinstance(row.model_bound, str):
        return row.model_bound, "model's roofline (no counters)"
    return None, "no counters and no device for the model's roofline"
