"""Fill CuPy's on-disk kernel cache before the GPU suite (tools/gpu_stage.sh suite): every kernel
module of the default build, under every L1 build, compiled one process per CPU core.

A lent machine starts with an empty cache, and a process compiles its modules one at a time as it
first launches them: on an H200 (2026-11-26, tests/data/gpu-2026-11-26e-h200) the suite's two
selftests spent about 100 s doing so. With the cache filled, every test process reads the
binaries instead. Prints one line: how many modules, how long, on how many processes.
"""

from __future__ import annotations

import os
import time


def main() -> None:
    from tracker.gpu.cupy_backend import compile_ahead
    from tracker.gpu.kernels import BUILDS, modules

    jobs = [(source, defines, build) for build in BUILDS for source, defines in modules()]
    workers = min(len(jobs), os.cpu_count() or 1)
    start = time.perf_counter()
    compile_ahead(jobs, workers)
    print(
        f"{len(jobs)} kernel modules ({len(jobs) // len(BUILDS)} under each of {', '.join(BUILDS)}) compiled into "
        f"CuPy's cache in {time.perf_counter() - start:.1f} s on {workers} processes"
    )


if __name__ == "__main__":  # the guard spawn needs: each worker imports this file anew
    main()
