"""One figure of one workload over the commits and dates that made it: the complete runs of a
network at a batch (on a GPU, by an implementation), oldest first, each with the code that made it
(``run.provenance``) and its figure: the iteration's time (``iteration_ms``: the median over its
measured iterations, or the model's total for a model run) or a counter summed over its layer
phases (each the median over its measured iterations)."""

from __future__ import annotations

import json

import pandas as pd

from tracker.analysis import view
from tracker.analysis.runtime import iteration
from tracker.errors import TrackerError, UnknownName
from tracker.store import Store

ITERATION = "iteration_ms"
COLUMNS = ("run_id", "started_at", "commit", "dirty", "kernels_commit", "device_name", "implementation", "source")


def check_metric(metric: str) -> str:
    from tracker.metrics import BY_NAME

    if metric != ITERATION and metric not in BY_NAME:
        raise UnknownName(f"no figure '{metric}': {ITERATION}, or a metric of the catalog (tracker metrics)")
    return metric


def history(
    store: Store,
    network: str,
    batch: int,
    device: str | None = None,
    implementation: str | None = None,
    metric: str = ITERATION,
) -> pd.DataFrame:
    """The runs' figure, oldest first: COLUMNS, then the figure in a column named after it; refused
    in one line where no run matches."""
    check_metric(metric)
    from tracker.store.queries import complete_runs

    chosen = complete_runs(store, network, batch, implementation)
    if device is not None:
        chosen = [run for run in chosen if _same_gpu(run["device_name"] or "", device)]
    if not chosen:
        raise TrackerError(
            f"no complete run of {network} at batch {batch}"
            + (f" on {device}" if device else "")
            + (f" by {implementation}" if implementation else "")
            + " in the store (tracker runs lists them)"
        )
    rows = [_row(store, run, metric) for run in chosen]
    return pd.DataFrame(rows, columns=[*COLUMNS, metric])


def _same_gpu(stored: str, asked: str) -> bool:
    """A run's GPU is the one asked for by its stored name, or by the catalog's name of it."""
    from tracker.model import lookup

    if stored.lower() == asked.lower():
        return True
    try:
        return bool(stored) and lookup(stored).name == lookup(asked).name
    except UnknownName:
        return False


def _row(store: Store, run: dict, metric: str) -> dict:
    made = run["provenance"]
    made = json.loads(made) if isinstance(made, str) else made  # as the driver hands a JSON column
    made = made if isinstance(made, dict) else {}
    value, source = _figure(store, int(run["id"]), metric)
    return dict(
        run_id=int(run["id"]),
        started_at=pd.Timestamp(run["started_at"]).isoformat(timespec="seconds"),
        commit=(made.get("commit") or "")[:10] or None,
        dirty=made.get("dirty"),
        kernels_commit=(made.get("kernels_commit") or "")[:10] or None,
        device_name=run["device_name"],
        implementation=run["implementation"],
        source=source,
    ) | {metric: value}


def _figure(store: Store, run_id: int, metric: str) -> tuple[float | None, str | None]:
    if metric == ITERATION:
        found = iteration(store, run_id)
        return found["ms"], found["source"]
    values = view(store, "layer_metric", run_id)
    values = values[values["name"] == metric]["value"]
    return (float(values.sum()), "measured") if values.notna().any() else (None, None)


def plot(frame: pd.DataFrame, metric: str, title: str):
    """The figure over the runs, in start order, each point labelled with its run and commit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    figure, axes = plt.subplots(figsize=(max(6.0, 0.6 * len(frame)), 4.0))
    known = frame[frame[metric].notna()].reset_index(drop=True)
    sns.lineplot(x=known.index, y=known[metric], marker="o", ax=axes)
    axes.set_xticks(known.index, [f"{r.run_id}\n{r.commit or '?'}{'+' if r.dirty else ''}" for r in known.itertuples()])
    axes.set_xlabel("run, commit (+: uncommitted changes)")
    axes.set_ylabel(metric)
    axes.set_title(title)
    figure.tight_layout()
    return figure
