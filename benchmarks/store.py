"""Trace-store benchmark (not a test): build stores of AlexNet batch-128 ncu-shaped runs through
tracker's own run writer, time the ingest, and time every view for one run.

Each run: 21 layers, 49 predictions, one launch per layer phase and measured iteration (5
repeats: 245 launches), every catalog metric on every launch (about 24,000 metric rows). Values
are random: the store's speed does not depend on them. Prints per store size the ingest rate and
each view's time for one run, beside the goals of issue 13 (views <= 20 ms, bar 100 ms; ingest
>= 500,000 rows/s, bar 100,000).

    python benchmarks/store.py [--runs 10,100] [--keep DIR] [--db postgresql+psycopg://...]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from sqlalchemy import text

from tracker.metrics import CATALOG
from tracker.model import lookup, predict
from tracker.nets import build
from tracker.store import open_store, recording
from tracker.store.views import VIEWS

VIEW_GOAL_MS, VIEW_BAR_MS = 20.0, 100.0
INGEST_GOAL, INGEST_BAR = 500_000, 100_000
REPEATS = 5


def run_rows(net, rng) -> tuple[list[dict], list[dict]]:
    """The launch log and counters of one measured run (random values, realistic shape)."""
    phases = [(layer, phase) for layer in net.layers for phase in layer.phases]
    launches, metrics = [], []
    for repeat in range(REPEATS):
        for layer, phase in phases:
            invocation = len(launches)
            launches.append(
                dict(
                    invocation=invocation,
                    layer_id=layer.id,
                    phase=phase,
                    repeat=repeat,
                    kernel_name=f"{layer.kind}_{phase}",
                    variant="shared",
                    l1_policy="ca",
                    grid_x=64,
                    grid_y=1,
                    grid_z=1,
                    block_x=256,
                    block_y=1,
                    block_z=1,
                    shared_bytes=8192,
                    registers=64,
                    time_ms=float(rng.random()),
                )
            )
            metrics += [
                dict(invocation=invocation, name=m.name, value=float(v))
                for m, v in zip(CATALOG, rng.random(len(CATALOG)) * 1e6)
            ]
    return launches, metrics


def add_run(db: str, net, predictions, rng) -> tuple[int, float]:
    """One run through the writer; (rows written, seconds spent writing them)."""
    launches, metrics = run_rows(net, rng)
    store = open_store(db, write=True)
    with recording(
        store,
        network=net.name,
        network_options=net.options,
        batch=128,
        phases="both",
        dtype_bits=32,
        variants={},
        l1_bypass=False,
        backend="ncu",
        backend_reason="benchmarks/store.py",
        repeat=REPEATS,
        predicted_peak_bytes=0,
    ) as run:
        run.add_layers(net, predictions)
        start = time.perf_counter()
        run.add_launches(launches, metrics)
        seconds = time.perf_counter() - start
    store.dispose()
    return len(launches) + len(metrics), seconds


def time_views(db: str, run_id: int, tries: int = 5) -> tuple[dict[str, float], dict[str, int]]:
    """Per view: the median milliseconds of ``SELECT * FROM view WHERE run_id = ?`` with every row
    fetched into Python through SQLAlchemy (what an analysis pays), and the rows it returned."""
    store = open_store(db, write=False)
    times, rows = {}, {}
    with store.connect() as conn:
        for view in VIEWS:
            samples = []
            for _ in range(tries):
                start = time.perf_counter()
                rows[view.name] = len(
                    conn.execute(text(f"SELECT * FROM {view.name} WHERE run_id = :r"), {"r": run_id}).fetchall()
                )
                samples.append((time.perf_counter() - start) * 1e3)
            times[view.name] = statistics.median(samples)
    store.dispose()
    return times, rows


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--runs", default="10,100", help="store sizes, in runs")
    args.add_argument("--keep", default=None, help="build the stores in this folder and keep them")
    args.add_argument("--db", default=None, help="an empty database URL to build in instead (PostgreSQL)")
    opts = args.parse_args()
    sizes = sorted(int(n) for n in opts.runs.split(","))
    net = build("alexnet")
    predictions = predict(net, 128, lookup("h100"))
    rng = np.random.default_rng(0)
    folder = Path(opts.keep or tempfile.mkdtemp(prefix="tracker-store-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    db = opts.db or str(folder / "bench.db")
    if not opts.db:
        Path(db).unlink(missing_ok=True)
    rows = seconds = 0.0
    built, results, counts = 0, {}, {}
    for size in sizes:
        while built < size:
            n, s = add_run(db, net, predictions, rng)
            rows, seconds, built = rows + n, seconds + s, built + 1
            if built % 10 == 0 or built == size:
                print(f"{built}/{size} runs, {rows / seconds:,.0f} rows/s", flush=True)
        results[size], counts = time_views(db, size // 2)  # a run in the middle of the store
    rate = rows / seconds
    print(
        f"\ningest: {rate:,.0f} rows/s over {built} runs ({rate / INGEST_GOAL:.2f}x the goal of "
        f"{INGEST_GOAL:,}, {rate / INGEST_BAR:.2f}x the bar of {INGEST_BAR:,})"
    )
    print(f"\n| view | rows | {' | '.join(f'{n} runs, ms' for n in sizes)} | largest / {VIEW_GOAL_MS:.0f} ms goal |")
    print(f"|---|---|{'---|' * len(sizes)}---|")
    for view in VIEWS:
        cells = " | ".join(f"{results[n][view.name]:.1f}" for n in sizes)
        print(f"| {view.name} | {counts[view.name]:,} | {cells} | {results[sizes[-1]][view.name] / VIEW_GOAL_MS:.2f} |")
    worst = max(results[sizes[-1]].values())
    print(
        f"\nslowest view at {sizes[-1]} runs: {worst:.1f} ms "
        f"({'meets' if worst <= VIEW_GOAL_MS else 'misses'} the {VIEW_GOAL_MS:.0f} ms goal, "
        f"{'meets' if worst <= VIEW_BAR_MS else 'misses'} the {VIEW_BAR_MS:.0f} ms bar)"
    )


if __name__ == "__main__":
    main()
