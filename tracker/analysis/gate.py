"""A regression gate for CI: a run against a baseline run (from the same store or another), per
layer phase and for the whole iteration, on time and on any counter asked for.

A figure regresses when it is worse than the baseline's by more than the tolerance **and** by more
than the two runs' spreads over their measured iterations: the run's best iteration is worse than
the baseline's worst (their [min, max] ranges do not overlap), so run-to-run noise alone never
fails the gate. Where either run measured one iteration, its spread is unknown and the tolerance
alone decides; the row says so. Time and most counters are worse higher; hit rates, throughputs and
utilizations are worse lower (``WORSE_LOWER``, by the catalog's family).

Only like is gated against like: runs that differ in GPU, network, batch or implementation are
refused unless the caller names the difference (``across``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd

from tracker.analysis import in_layer_order, run_row, view
from tracker.analysis.runtime import iteration, runtime
from tracker.errors import Mismatch, UnknownName
from tracker.store import Store

TOLERANCE_PCT = 5.0
ALIKE = {"gpu": "device_name", "network": "network", "batch": "batch", "implementation": "implementation"}
WORSE_LOWER = ("cache", "throughput", "utilization")  # metric families where a fall is the regression
COLUMNS = ("figure", "layer", "phase", "base", "run", "change_pct", "beyond_spread", "regression", "note")


def check_alike(store: Store, run: int, base_store: Store, base: int, across: Iterable[str] = ()) -> None:
    """Refuse runs that differ in what ``ALIKE`` names, unless ``across`` allows the difference."""
    ours, theirs = run_row(store, run), run_row(base_store, base)
    for what, column in ALIKE.items():
        if what not in across and ours[column] != theirs[column]:
            raise Mismatch(
                f"run {run} and base run {base} differ in {what} ({ours[column]} against {theirs[column]}): "
                f"gate like against like, or say --across {what}"
            )


def judge(base: tuple, run: tuple, tolerance_pct: float, worse_lower: bool = False) -> dict:
    """One figure: ``base`` and ``run`` as (median, min, max, iterations). Its change in % (worse
    positive), whether the run's best is worse than the base's worst, and whether it regressed."""
    (b_mid, b_min, b_max, b_n), (r_mid, r_min, r_max, r_n) = base, run
    if b_mid is None or r_mid is None or pd.isna(b_mid) or pd.isna(r_mid):
        return dict(change_pct=None, beyond_spread=None, regression=False, note="not measured in both")
    sign = -1 if worse_lower else 1
    change = sign * 100 * (r_mid - b_mid) / abs(b_mid) if b_mid else (0.0 if r_mid == b_mid else None)
    known = b_n > 1 and r_n > 1
    beyond = (r_max < b_min if worse_lower else r_min > b_max) if known else None
    regressed = change is not None and change > tolerance_pct and beyond is not False
    note = "" if known else "one iteration: its spread is unknown, the tolerance alone decides"
    return dict(change_pct=change, beyond_spread=beyond, regression=regressed, note=note)


def _times(store: Store, run: int) -> pd.DataFrame:
    frame = runtime(store, run)
    if (frame["source"] != "measured").any():
        raise Mismatch(f"run {run} holds no measured times (a model run): the gate judges measurements")
    return frame


def gate(
    store: Store,
    run: int,
    base_store: Store,
    base: int,
    tolerance_pct: float = TOLERANCE_PCT,
    metrics: Sequence[str] = (),
    across: Iterable[str] = (),
) -> pd.DataFrame:
    """Every figure judged, one row each: time per layer phase, the iteration, then each metric per
    layer phase (COLUMNS)."""
    if store is base_store and run == base:
        raise Mismatch(f"run {run} gated against itself: name its baseline")
    check_alike(store, run, base_store, base, across)
    ours, theirs = _times(store, run), _times(base_store, base)
    key = ["layer", "phase"]
    both = theirs.merge(ours, on=key, how="outer", suffixes=("_b", "_r"), indicator=True)
    lost = both[both["_merge"] != "both"]
    if not lost.empty:
        first = lost.iloc[0]
        raise Mismatch(
            f"run {run} and base run {base} ran different layer phases ({first['layer']} {first['phase']} is in "
            "one only): gate runs of one workload"
        )
    rows = [
        dict(figure="time_ms", layer=r.layer, phase=r.phase, base=r.ms_b, run=r.ms_r)
        | judge(_range(r, "_b"), _range(r, "_r"), tolerance_pct)
        for r in in_layer_order(both.rename(columns={"layer_id_b": "layer_id"})).itertuples()
    ]
    whole_b, whole_r = iteration(base_store, base), iteration(store, run)
    rows.append(
        dict(figure="time_ms", layer="iteration", phase="all", base=whole_b["ms"], run=whole_r["ms"])
        | judge(_whole(whole_b), _whole(whole_r), tolerance_pct)
    )
    for name in metrics:
        rows += _metric_rows(store, run, base_store, base, name, tolerance_pct)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _range(row, side: str) -> tuple:
    return (
        getattr(row, f"ms{side}"),
        getattr(row, f"min_ms{side}"),
        getattr(row, f"max_ms{side}"),
        getattr(row, f"repeats{side}"),
    )


def _whole(found: dict) -> tuple:
    return (found["ms"], found["min_ms"], found["max_ms"], found["repeats"])


def _metric_rows(store: Store, run: int, base_store: Store, base: int, name: str, tolerance_pct: float) -> list[dict]:
    from tracker.metrics import BY_NAME

    if name not in BY_NAME:
        raise UnknownName(f"no metric '{name}' in the catalog (tracker metrics lists them)")
    worse_lower = BY_NAME[name].family in WORSE_LOWER
    frames = []
    for where, which in ((base_store, base), (store, run)):
        found = view(where, "layer_metric", which)
        found = found[found["name"] == name]
        if found.empty:
            raise Mismatch(f"run {which} holds no {name} (its collector did not count it): gate a counter both hold")
        names = view(where, "layer_phase", which)[["layer_id", "layer"]].drop_duplicates()
        frames.append(found.merge(names, on="layer_id"))
    both = frames[0].merge(frames[1], on=["layer", "phase"], suffixes=("_b", "_r"))
    return [
        dict(figure=name, layer=r.layer, phase=r.phase, base=r.value_b, run=r.value_r)
        | judge(
            (r.value_b, r.min_value_b, r.max_value_b, r.repeats_b),
            (r.value_r, r.min_value_r, r.max_value_r, r.repeats_r),
            tolerance_pct,
            worse_lower,
        )
        for r in in_layer_order(both.rename(columns={"layer_id_b": "layer_id"})).itertuples()
    ]


def junit(frame: pd.DataFrame, run: int, base: int) -> str:
    """The judged figures as JUnit XML, one test case a figure, a failure a regression: what CI reads."""
    from xml.sax.saxutils import quoteattr

    failures = int(frame["regression"].sum())
    cases = []
    for r in frame.itertuples():
        name = quoteattr(f"{r.figure} {r.layer} {r.phase}")
        body = ""
        if r.regression:
            message = quoteattr(f"{r.change_pct:.1f} % worse than base run {base} ({r.base:.6g} -> {r.run:.6g})")
            body = f'<failure message={message} type="regression"/>'
        cases.append(f'    <testcase classname="tracker.gate" name={name}>{body}</testcase>')
    suite = quoteattr(f"tracker gate {run} --against {base}")
    head = f'<testsuite name={suite} tests="{len(frame)}" failures="{failures}">'
    return "\n".join(['<?xml version="1.0" encoding="UTF-8"?>', head, *cases, "</testsuite>"]) + "\n"
