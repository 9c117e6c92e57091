"""`tracker serve` load benchmark (not a test): 10 clients x 200 requests against a 50-run store on
loopback, as uvicorn serves it (`tracker serve`'s settings). Each client walks the pages a person
opens (the runs page, a run, a layer phase, compare, a query, a run's history), over runs picked
at random; errors are counted (any status but 200) and latency is wall time per request.
Prints and writes (--out) the p50, p95 and p99 latency per page, beside the target p95 <= 200 ms.

The store: 50 runs of AlexNet at batch 128 with every catalog counter on every launch, through
tracker's run writer (benchmarks/store.py's shape: random values, real sizes).

    python benchmarks/serve_load.py [--runs 50] [--clients 10] [--requests 200] [--out FILE]
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from datetime import date
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))

TARGET_P95_MS = 200.0


def build_store(db: str, runs: int) -> None:
    import numpy as np
    from store import add_run  # benchmarks/store.py

    from tracker.model import lookup, predict
    from tracker.nets import build

    net = build("alexnet")
    predictions = predict(net, 128, lookup("h100"))
    rng = np.random.default_rng(0)
    for n in range(runs):
        add_run(db, net, predictions, rng)
        if (n + 1) % 10 == 0:
            print(f"{n + 1}/{runs} runs stored", flush=True)


def paths(runs: int, rng: random.Random) -> list[tuple[str, str]]:
    """One person's walk: (page, path)."""
    run = rng.randint(1, runs)
    other = rng.randint(1, runs)
    layer, phase = rng.choice([("conv2", "fwd"), ("conv3", "bwd_data"), ("fc6", "bwd_weight"), ("relu1", "fwd")])
    query = quote(f"SELECT layer, phase, measured_ms FROM layer_phase WHERE run_id = {run} ORDER BY measured_ms DESC")
    return [
        ("runs", "/"),
        ("run", f"/runs/{run}"),
        ("phase", f"/runs/{run}/{layer}/{phase}"),
        ("compare", f"/compare?a={run}&b={other if other != run else run % runs + 1}"),
        ("sql", f"/sql?q={query}"),
        ("history", "/history?network=alexnet&batch=128"),
    ]


def client(url: str, runs: int, requests: int, seed: int, times: dict, errors: list) -> None:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    rng = random.Random(seed)
    done = 0
    while done < requests:
        for page, path in paths(runs, rng):
            if done == requests:
                break
            start = time.perf_counter()
            conn.request("GET", path)
            answer = conn.getresponse()
            answer.read()
            times.setdefault(page, []).append(1e3 * (time.perf_counter() - start))
            if answer.status != 200:
                errors.append(f"{path} -> {answer.status}")
            done += 1
    conn.close()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def _row(page: str, values: list[float]) -> str:
    p50, p95, p99 = statistics.median(values), percentile(values, 95), percentile(values, 99)
    return f"| {page} | {len(values)} | {p50:.1f} | {p95:.1f} | {p99:.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--requests", type=int, default=200, help="per client")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here (markdown)")
    args = parser.parse_args()
    from served import serving  # tests/served.py: the app on loopback, as tracker serve runs it

    with tempfile.TemporaryDirectory(prefix="tracker-serve-bench-") as tmp:
        db = str(Path(tmp) / "bench.db")
        build_store(db, args.runs)
        with serving(db) as url:
            times: dict[str, list[float]] = {}
            errors: list[str] = []
            started = time.perf_counter()
            threads = [
                threading.Thread(target=client, args=(url, args.runs, args.requests, seed, times, errors))
                for seed in range(args.clients)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            wall = time.perf_counter() - started
    every = [t for page in times.values() for t in page]
    rows = [_row(page, values) for page, values in sorted(times.items())] + [_row("**all**", every)]
    p95 = percentile(every, 95)
    verdict = "met" if p95 <= TARGET_P95_MS else "missed"
    where = f"{platform.node() or 'this machine'} ({os.cpu_count()} CPUs, Python {platform.python_version()})"
    command = f"python benchmarks/serve_load.py --runs {args.runs} --clients {args.clients} --requests {args.requests}"
    header = (
        f"`{command}` on {where}, {date.today()}: {len(every)} requests in {wall:.1f} s "
        f"({len(every) / wall:.0f}/s), {len(errors)} errors; p95 {p95:.0f} ms against the target of "
        f"{TARGET_P95_MS:.0f} ms ({verdict}).\n\n"
        "| page | requests | p50 (ms) | p95 (ms) | p99 (ms) |\n|---|---|---|---|---|"
    )
    table = "\n".join([header, *rows]) + "\n"
    if errors:
        table += "\nErrors: " + "; ".join(errors[:10]) + "\n"
    if args.out:
        args.out.write_text("# tracker serve: latency under load\n\n" + __doc__.split("\n\n")[1] + "\n\n" + table)
    print(table)


if __name__ == "__main__":
    main()
