"""A stand-in nvprof (there is no nvprof, nor a GPU before Volta, on these machines) that
answers from the public K20c samples in tests/data/ncu (SOURCES.md: jacobi-orig, Tesla K20c):

- ``--version``: a banner in nvprof's form (written for the stand-in: no recording of one);
- ``--query-metrics``: the metrics the K20c metric sample holds, one ``name:  description``
  line each, as nvprof lists them (the descriptions are the sample's);
- a profile (``... --log-file F program``): the K20c GPU trace as recorded, each launch row
  given a column per requested metric that the K20c metric sample holds for its kernel (the
  sample's Avg over the kernel's invocations, which is its value: Min = Max for every metric
  kept), written to F. The program is not run. The recorded program runs its four kernels once
  per iteration, three times: a workload (``-m tracker.implementations.child profiled SPEC``) measuring N
  iterations gets the trace of the first N (all three where N is larger).

$STAND_IN_LOG, if set, gets each call's arguments; $STAND_IN_FAIL makes a profile fail with
that text on stderr (as nvprof prints an error) and status 1; $STAND_IN_SIGTERM_PARENT makes a
profile send SIGTERM to the process that started it (as `timeout` or a scheduler ends tracker
while pass 2 runs), then wait to be stopped.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import sys
import time
from pathlib import Path

DATA = Path(__file__).parent / "data" / "ncu"
TRACE = DATA / "nvprof-gputrace-csv-k20c.csv"
METRICS = DATA / "nvprof-metrics-csv-k20c-stalls.csv"


def _table(path: Path, first: str) -> tuple[list[str], list[list[str]]]:
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    return lines[:start], list(csv.reader(lines[start:]))


def _metrics() -> dict[str, dict[str, tuple[str, str]]]:
    """kernel -> metric -> (description, Avg)"""
    _, rows = _table(METRICS, '"Device","Kernel"')
    found: dict[str, dict[str, tuple[str, str]]] = {}
    for _device, kernel, _calls, name, description, _low, _high, avg in rows[1:]:
        found.setdefault(kernel, {})[name] = (description, avg)
    return found


def query() -> str:
    names = {name: description for kernel in _metrics().values() for name, (description, _) in kernel.items()}
    return "Device 0 (Tesla K20c):\n\tAvailable Metrics:\n                            Name   Description\n" + "".join(
        f"{name:>32}:  {description}\n" for name, description in sorted(names.items())
    )


KERNELS_PER_ITERATION = 4  # the recorded program's kernels, launched once each per iteration


def trace(wanted: list[str], iterations: int) -> str:
    preamble, rows = _table(TRACE, '"Start","Duration"')
    header, units, launches = rows[0], rows[1], _first_iterations(rows[2:], rows[0], iterations)
    metrics = _metrics()
    kept = [m for m in wanted if any(m in per for per in metrics.values())]
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
    writer.writerow(header + kept)
    out.write(",".join(units + [""] * len(kept)) + "\n")
    for row in launches:
        kernel = row[header.index("Name")].rpartition(" [")[0]
        values = [metrics.get(kernel, {}).get(m, ("", ""))[1] for m in kept]
        writer.writerow(row + values)
    return "\n".join(preamble) + "\n" + out.getvalue()


def _first_iterations(rows: list[list[str]], header: list[str], iterations: int) -> list[list[str]]:
    """The trace's rows up to the last kernel of its first ``iterations`` iterations (memcpys kept)."""
    kernels = [i for i, row in enumerate(rows) if row[header.index("Grid X")]]
    wanted = KERNELS_PER_ITERATION * iterations
    return rows if wanted >= len(kernels) else rows[: kernels[wanted - 1] + 1]


def _iterations(args: list[str]) -> int:
    """The measured iterations of the workload nvprof was asked to run (its JSON spec, last)."""
    return int(json.loads(args[-1])["repeat"])


def main(args: list[str]) -> int:
    if os.environ.get("STAND_IN_LOG"):
        with open(os.environ["STAND_IN_LOG"], "a") as log:
            log.write(" ".join(args) + "\n")
    if "--version" in args:
        print(
            "nvprof: NVIDIA (R) Cuda command line profiler\nCopyright (c) 2012 - 2019 NVIDIA Corporation\n"
            "Release version 10.2.89 (21)"
        )
        return 0
    if "--query-metrics" in args:
        print(query(), file=sys.stderr)  # nvprof writes its listings to stderr
        return 0
    if os.environ.get("STAND_IN_FAIL"):
        print(os.environ["STAND_IN_FAIL"], file=sys.stderr)
        return 1
    if os.environ.get("STAND_IN_SIGTERM_PARENT"):
        os.kill(os.getppid(), signal.SIGTERM)
        time.sleep(60)  # profiling on, until stopped
        return 0
    wanted = args[args.index("--metrics") + 1].split(",")
    Path(args[args.index("--log-file") + 1]).write_text(trace(wanted, _iterations(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
