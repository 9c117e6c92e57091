"""`tracker import` benchmark (not a test): wall time and peak memory of importing each public
sample (tests/data/public, tests/data/ncu), each in a fresh process, as a user runs it; and the
largest, the ResNet-50 PyTorch trace, scaled: its events repeated k times, each copy shifted past
the one before (a synthetic trace of k x 3 steps, to show how time and memory grow with the file).

A PyTorch trace is parsed whole by Python's json (C): its peak memory is about six times its JSON
text, so the 512 MiB of JSON a trace may hold bounds its import near 3 GB. (ijson 3.6, the
streaming parser tried, built a 100,000-deep nesting probe until the kernel killed it: a hostile
file's way to take a machine down, where json refuses it in one line.) An Nsight Systems export is
read by SQLite, table by table; an Nsight Compute report by NVIDIA's reader.

    python benchmarks/import_files.py [--scale 1,4,16] [--out benchmarks/RESULTS-import.md]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
SAMPLES = [
    *sorted((DATA / "public").glob("*.json.gz")),
    *sorted((DATA / "public").glob("*.sqlite.gz")),
    DATA / "ncu" / "ncu-report-v100-ncu2020.1-nvtx-dram.ncu-rep",
    DATA / "ncu" / "ncu-raw-nvtx-h100-sm90-ncu2025.3-alexnet-b16.csv",
]
RESNET = DATA / "public" / "pytorch-resnet50-ddp-train-a100-kineto.json.gz"


def imported(path: Path, work: Path) -> tuple[float, float, int]:
    """(seconds, peak resident MiB, launches) of `tracker import PATH` in a process of its own."""
    db = work / "bench.db"
    db.unlink(missing_ok=True)
    command = [sys.executable, "-m", "tracker", "import", str(path), "--db", str(db), "--format", "json"]
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = child.stdout.read() if child.stdout else b""
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"tracker import {path} failed (status {status})")
    return seconds, usage.ru_maxrss / 1024, json.loads(out)[0]["launches"]


def unpacked(path: Path, work: Path) -> Path:
    """A .sqlite.gz sample as the .sqlite file nsys writes."""
    if not path.name.endswith(".sqlite.gz"):
        return path
    target = work / path.name.removesuffix(".gz")
    target.write_bytes(gzip.decompress(path.read_bytes()))
    return target


def scaled(k: int, path: Path) -> None:
    """The ResNet trace with its events repeated k times, copy c shifted by c x its span, to ``path``."""
    trace = json.loads(gzip.decompress(RESNET.read_bytes()))
    events = trace["traceEvents"]
    times = [e["ts"] for e in events if "ts" in e]
    span = max(times) - min(times) + 1000
    copies = []
    for c in range(k):
        for e in events:
            copy = dict(e, ts=e["ts"] + c * span) if "ts" in e else e
            if c and "args" in e and "correlation" in e["args"]:
                copy["args"] = dict(e["args"], correlation=e["args"]["correlation"] + c * 10_000_000)
            if c and e.get("name", "").startswith("ProfilerStep#"):
                copy["name"] = f"ProfilerStep#{c * 100 + int(e['name'].split('#')[1])}"
            copies.append(copy)
    path.write_text(json.dumps(dict(trace, traceEvents=copies)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="1,4,16", help="copies of the ResNet trace's events (default 1,4,16)")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here (markdown)")
    parser.add_argument("--make", nargs=2, metavar=("K", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make:
        scaled(int(args.make[0]), Path(args.make[1]))
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="tracker-import-bench-") as tmp:
        work = Path(tmp)
        cases = [(p.name, unpacked(p, work)) for p in SAMPLES]
        for k in args.scale.split(","):  # made in a process of their own: a child's peak counts its parent's
            path = work / f"resnet-x{k}.json"
            subprocess.run([sys.executable, __file__, "--make", k, str(path)], check=True)
            cases.append((f"ResNet-50 trace x{k} (synthetic)", path))
        for name, path in cases:
            seconds, mib, launches = imported(path, work)
            size = path.stat().st_size / 2**20
            rows.append(f"| {name} | {size:.1f} | {launches:,} | {seconds:.2f} | {mib:.0f} |")
            print(rows[-1], flush=True)
    header = (
        f"`python benchmarks/import_files.py --scale {args.scale}` on {platform.node() or 'this machine'} "
        f"({os.cpu_count()} CPUs, Python {platform.python_version()}), {date.today()}: each import a fresh "
        "process into a new SQLite store; time is wall time, memory the process's peak resident set.\n\n"
        "| file | size (MiB, as read) | launches | time (s) | peak memory (MiB) |\n|---|---|---|---|---|"
    )
    table = "\n".join([header, *rows]) + "\n"
    if args.out:
        args.out.write_text("# tracker import: time and memory\n\n" + __doc__.split("\n\n")[1] + "\n\n" + table)
    print(table)


if __name__ == "__main__":
    main()
