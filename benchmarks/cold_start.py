"""CLI cold start: wall time of `tracker --help` and `tracker model alexnet --batch 1`.

Not a test: a speed target (under 0.5 s on a 2-core developer machine). Run it with
`python benchmarks/cold_start.py [repeats]`; it prints the median and spread of each command.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time

COMMANDS = (["--help"], ["model", "alexnet", "--batch", "1"], ["networks"])
TARGET_S = 0.5


def wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(repeats: int = 15) -> None:
    exe = shutil.which("tracker") or sys.exit("install tracker first: pip install -e .")
    for args in COMMANDS:
        wall([exe, *args])  # warm the file cache
        times = sorted(wall([exe, *args]) for _ in range(repeats))
        median = statistics.median(times)
        verdict = "ok" if median < TARGET_S else f"over the {TARGET_S} s target"
        print(f"tracker {' '.join(args):<28} median {median * 1e3:6.0f} ms  "
              f"(min {times[0] * 1e3:.0f}, max {times[-1] * 1e3:.0f}, n={repeats})  {verdict}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
