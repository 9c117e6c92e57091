"""One run against another, per layer and phase: speedup, its noise, and what the counters did.

``speedup = a_ms / b_ms``: above 1, run B is faster. A speedup is marked ``noise`` when the two
runs' ranges over their measured iterations ([min, max]) overlap: the difference is then no larger
than the run-to-run spread. Only like is compared with like: the same network and layers, phases,
and both measured or both the model's predictions; anything else, or a run against itself, is
refused, saying why. Runs at different batch sizes are compared per image (``basis``): each time
is divided by its run's batch.
"""

from __future__ import annotations

import pandas as pd

from tracker.analysis import in_layer_order, view
from tracker.analysis.runtime import iteration, runtime
from tracker.errors import Mismatch
from tracker.model.roofline import check_phases
from tracker.phases import PHASE_SETS
from tracker.store import Store

KEY = ["layer_id", "layer", "kind", "phase"]
# What a comparison shows of each layer phase, in this order (tracker compare, the web app)
SHOWN = ("layer", "phase", "a_ms", "b_ms", "spread_pct_a", "spread_pct_b", "speedup", "change_pct", "noise")
# (view, column) pairs whose change between two runs compare reports, when both runs have counters.
DELTAS = (
    ("cache_hit_rate", "l1_hit_rate"),
    ("cache_hit_rate", "l2_hit_rate"),
    ("memory_traffic", "dram_read_bytes"),
    ("memory_traffic", "dram_write_bytes"),
    ("stall_breakdown", "first_reason"),
    ("stall_breakdown", "first_share"),
    ("fp_instructions", "fp32_inst"),
)


def _check_comparable(a: pd.DataFrame, b: pd.DataFrame, run_a: int, run_b: int) -> None:
    layers_a = list(a.drop_duplicates("layer_id")[["layer", "kind"]].itertuples(index=False))
    layers_b = list(b.drop_duplicates("layer_id")[["layer", "kind"]].itertuples(index=False))
    if layers_a != layers_b:
        first = next(
            (i for i, (x, y) in enumerate(zip(layers_a, layers_b)) if x != y), min(len(layers_a), len(layers_b))
        )
        at = lambda layers: f"{layers[first][0]} ({layers[first][1]})" if first < len(layers) else "nothing"  # noqa: E731
        raise Mismatch(
            f"runs {run_a} and {run_b} have different layers: layer {first + 1} is {at(layers_a)} in run "
            f"{run_a} but {at(layers_b)} in run {run_b}"
        )
    phases_a, phases_b = set(zip(a.layer_id, a.phase)), set(zip(b.layer_id, b.phase))
    if phases_a != phases_b:
        raise Mismatch(
            f"runs {run_a} and {run_b} ran different phases ({len(phases_a)} and {len(phases_b)} layer "
            "phases): profile both with the same --phases, or compare the phases both ran (--phases fwd)"
        )
    sources = {run_a: set(a.source.dropna()), run_b: set(b.source.dropna())}
    for run, found in sources.items():
        if not found:
            raise Mismatch(
                f"run {run} has no times: it is a model run without a device "
                "(profile it with --device NAME for the roofline's times)"
            )
    if sources[run_a] != sources[run_b]:
        kind = {run: "measured" if "measured" in s else "the model's prediction" for run, s in sources.items()}
        raise Mismatch(
            f"run {run_a} is {kind[run_a]} and run {run_b} is {kind[run_b]}: "
            "compare two measured runs or two model runs"
        )


TIMES = ("ms", "min_ms", "max_ms")


def _batches(store: Store, run_a: int, run_b: int) -> tuple[int, int]:
    if run_a == run_b:
        raise Mismatch(f"run {run_a} compared with itself: name two different runs")
    runs = view(store, "run", None).set_index("id")["batch"]
    return int(runs[run_a]), int(runs[run_b])


def basis(store: Store, run_a: int, run_b: int) -> str:
    """'per image' when the runs' batch sizes differ, else 'per batch'."""
    batch_a, batch_b = _batches(store, run_a, run_b)
    return "per image" if batch_a != batch_b else "per batch"


def _per_image(frame: pd.DataFrame, batch: int) -> pd.DataFrame:
    return frame.assign(**{c: frame[c] / batch for c in TIMES})


def compare(store: Store, run_a: int, run_b: int, phases: str = "both") -> pd.DataFrame:
    """Per layer and phase (of ``phases``: fwd, bwd or both): a_ms, b_ms, their spreads, speedup,
    change_pct and noise, and the algorithm each ran where its kernel names say it (ours against
    cuDNN, say); times per image (``basis``) when the batch sizes differ."""
    batch_a, batch_b = _batches(store, run_a, run_b)
    a, b = (_only(runtime(store, run), phases) for run in (run_a, run_b))
    _check_comparable(a, b, run_a, run_b)
    if batch_a != batch_b:
        a, b = _per_image(a, batch_a), _per_image(b, batch_b)
    cols = ["ms", "min_ms", "max_ms", "spread_pct", "repeats", "algorithm"]
    frame = a[KEY + cols].merge(b[KEY + cols], on=KEY, suffixes=("_a", "_b"))
    if frame[["algorithm_a", "algorithm_b"]].isna().all().all():
        frame = frame.drop(columns=["algorithm_a", "algorithm_b"])
    frame = frame.rename(columns={"ms_a": "a_ms", "ms_b": "b_ms"})
    frame["speedup"] = frame["a_ms"] / frame["b_ms"].where(frame["b_ms"] > 0)
    frame["change_pct"] = 100 * (frame["speedup"] - 1)
    frame["noise"] = noise(frame)
    frame.insert(0, "run_b", run_b)
    frame.insert(0, "run_a", run_a)
    frame["basis"] = "per image" if batch_a != batch_b else "per batch"
    return in_layer_order(frame.drop(columns=["repeats_a", "repeats_b"]))


def _only(frame: pd.DataFrame, phases: str) -> pd.DataFrame:
    return frame[frame["phase"].isin(PHASE_SETS[check_phases(phases)])]


def noise(frame: pd.DataFrame) -> pd.Series:
    """True where the runs' [min, max] ranges overlap; None where a run has a single iteration (no
    spread to judge by) or nothing ran in either (a fused-away layer)."""
    overlap = (frame["min_ms_a"] <= frame["max_ms_b"]) & (frame["min_ms_b"] <= frame["max_ms_a"])
    judged = (frame["repeats_a"] > 1) & (frame["repeats_b"] > 1) & ((frame["a_ms"] > 0) | (frame["b_ms"] > 0))
    return overlap.astype(object).where(judged, None)


def compare_iterations(store: Store, run_a: int, run_b: int, phases: str = "both") -> dict:
    """The whole iteration of each run, or its ``phases`` (per image when the batch sizes differ),
    the speedup and whether it is within the spread."""
    batch_a, batch_b = _batches(store, run_a, run_b)
    a, b = iteration(store, run_a, phases), iteration(store, run_b, phases)
    if batch_a != batch_b:
        a, b = ({**t, **{c: t[c] / n for c in TIMES if t[c] is not None}} for t, n in ((a, batch_a), (b, batch_b)))
    speedup = a["ms"] / b["ms"] if a["ms"] and b["ms"] else None
    judged = a["repeats"] > 1 and b["repeats"] > 1
    overlap = judged and a["min_ms"] <= b["max_ms"] and b["min_ms"] <= a["max_ms"]
    return {
        "run_a": run_a,
        "run_b": run_b,
        "layer": "iteration",
        "phase": "all" if phases == "both" else phases,
        "a_ms": a["ms"],
        "b_ms": b["ms"],
        "spread_pct_a": a["spread_pct"],
        "spread_pct_b": b["spread_pct"],
        "speedup": speedup,
        "change_pct": 100 * (speedup - 1) if speedup else None,
        "noise": overlap if judged else None,
        "basis": "per image" if batch_a != batch_b else "per batch",
    }


def metric_deltas(store: Store, run_a: int, run_b: int) -> pd.DataFrame:
    """Per layer and phase, each DELTAS column in both runs and its change (B - A); empty when either
    run has no counters."""
    frames = []
    for name in dict.fromkeys(v for v, _ in DELTAS):
        columns = [c for v, c in DELTAS if v == name]
        a, b = view(store, name, run_a), view(store, name, run_b)
        if a.empty or b.empty:
            return pd.DataFrame()
        both = a[KEY + columns].merge(b[KEY + columns], on=KEY, suffixes=("_a", "_b"))
        for c in columns:
            if pd.api.types.is_numeric_dtype(both[f"{c}_a"]):
                both[f"{c}_change"] = both[f"{c}_b"] - both[f"{c}_a"]
        frames.append(both.set_index(KEY))
    return in_layer_order(pd.concat(frames, axis=1).reset_index())


def comparison(store: Store, run_a: int, run_b: int, phases: str = "both") -> pd.DataFrame:
    """Run B against run A, as every surface shows it (``tracker compare``, the experiments, the
    report): per layer and phase the speedup with its spreads and noise, where both runs have
    counters the change in hit rates, DRAM bytes and dominant stall beside it, and a last row
    ``iteration`` for the whole fwd+bwd (or the ``phases`` compared: fwd, bwd)."""
    per_layer = compare(store, run_a, run_b, phases)
    deltas = metric_deltas(store, run_a, run_b)
    if not deltas.empty:
        per_layer = per_layer.merge(deltas, on=KEY, how="left")
    return pd.concat([per_layer, pd.DataFrame([compare_iterations(store, run_a, run_b, phases)])], ignore_index=True)
