"""GPU idle time between launches, from the launches' real start times (imported traces, the library
arm, our kernels on a GPU): per layer phase, the idle time before its launches; per measured
iteration, its span from the first launch's start to the last one's end and the part of it when
no launch of it ran, as HTA's idle-time breakdown and Nsight Systems' timeline show it. The
medians are over measured iterations. A run that records durations alone has none."""

from __future__ import annotations

import pandas as pd

from tracker.analysis import view
from tracker.stats import over_repeats
from tracker.store import Store

NO_STARTS = (
    "the run records no launch start times (ours record them on a GPU; the library arm and imported "
    "traces from their traces; the model and an Nsight Compute report have none)"
)


def per_phase(store: Store, run_id: int) -> pd.DataFrame:
    """Per layer phase: idle_ms and busy_ms, medians over iterations, in layer and phase order."""
    frame = view(store, "layer_idle", run_id)
    if frame.empty:
        return frame
    keys = ["layer_id", "layer", "kind", "phase"]
    return _medians(frame, keys, ["idle_ms", "busy_ms"])


def per_iteration(store: Store, run_id: int) -> dict | None:
    """The medians over iterations of span_ms, idle_ms and idle_pct, and how many iterations; None
    where no launch has a start."""
    frame = view(store, "iteration_idle", run_id)
    if frame.empty:
        return None
    found = {column: over_repeats(frame[column]) for column in ("span_ms", "idle_ms", "idle_pct")}
    return {column: stats.median if stats else None for column, stats in found.items()} | {"iterations": len(frame)}


def _medians(frame: pd.DataFrame, keys: list[str], columns: list[str]) -> pd.DataFrame:
    rows = []
    for key, group in frame.groupby(keys, sort=False):
        medians = {column: stats.median if (stats := over_repeats(group[column])) else None for column in columns}
        rows.append(dict(zip(keys, key)) | medians)
    return pd.DataFrame(rows)


def line(store: Store, run_id: int) -> str | None:
    """'1.96 ms of 27.2 ms (7.2 %) in each iteration, median of 3': what `tracker show` says."""
    from tracker import units

    found = per_iteration(store, run_id)
    if found is None or found["span_ms"] is None:
        return None
    return (
        f"{units.milliseconds(found['idle_ms'])} of {units.milliseconds(found['span_ms'])} "
        f"({units.percent(found['idle_pct'] or 0)}) between launches in each iteration, "
        f"median of {found['iterations']}"
    )


def with_idle(rows: list[dict], store: Store, run_id: int) -> list[dict]:
    """``tracker show``'s layer rows, each with its layer phase's idle_ms where the run has starts."""
    frame = per_phase(store, run_id)
    idle = {} if frame.empty else {(r.layer_id, r.phase): r.idle_ms for r in frame.itertuples()}
    return [row | {"idle_ms": idle.get((row["layer_id"], row["phase"]))} for row in rows]
