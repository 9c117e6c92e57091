"""CLI cold start: wall time of the commands that need no GPU and start a fresh process each time.

Not a test: speed targets on a 2-core developer machine. `tracker --help`, `model` and `networks`
under 0.5 s; the read commands (`runs`, `show`, `sql`, `experiments`, on a store of two model runs
and an experiment) under 0.3 s. Run it with `python benchmarks/cold_start.py [repeats]`; it prints
the median and spread of each command.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = (["--help"], ["model", "alexnet", "--batch", "1"], ["networks"])
READS = (["runs"], ["show", "last"], ["sql", "SELECT * FROM run_summary"], ["experiments"])
TARGET_S, READ_TARGET_S = 0.5, 0.3


def wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(argv: list[str], target_s: float, repeats: int) -> None:
    wall(argv)  # warm the file cache
    times = sorted(wall(argv) for _ in range(repeats))
    median = statistics.median(times)
    verdict = "ok" if median < target_s else f"over the {target_s} s target"
    shown = " ".join(a for a in argv[1:] if not a.startswith(("--db", "/")))
    print(
        f"tracker {shown:<36} median {median * 1e3:6.0f} ms  "
        f"(min {times[0] * 1e3:.0f}, max {times[-1] * 1e3:.0f}, n={repeats})  {verdict}"
    )


def main(repeats: int = 15) -> None:
    exe = shutil.which("tracker") or sys.exit("install tracker first: pip install -e .")
    for args in COMMANDS:
        measure([exe, *args], TARGET_S, repeats)
    with tempfile.TemporaryDirectory() as folder:
        db = str(Path(folder) / "trace.db")
        subprocess.run(
            [
                exe,
                "experiment",
                "batch",
                "alexnet",
                "--batches",
                "1,2",
                "--backend",
                "model",
                "--device",
                "h100",
                "--db",
                db,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        for args in READS:
            measure([exe, *args, "--db", db], READ_TARGET_S, repeats)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
