"""The child process a collector profiles (pass 2): the planned workload's measured iterations,
between cudaProfilerStart and Stop, on our kernels through CuPy or on PyTorch's libraries.

``python -m tracker.profilers.child '<json spec>'`` runs it; the spec is ``Workload.to_json()``,
planned once in the parent, so the child launches what pass 1 logged, one for one. It lives here,
above both ``gpu/`` and ``library/``, because it runs either.
"""

from __future__ import annotations

import sys

from tracker.gpu.workload import Workload


def command(workload: Workload) -> list[str]:
    """The child's command line, for a profiler to wrap."""
    return [sys.executable, "-m", __name__, workload.to_json()]


def main(spec: str) -> None:
    workload = Workload.from_json(spec)
    if workload.library:
        from tracker.library.torch_run import run_child
    else:
        from tracker.gpu.runner import run_child
    run_child(workload)


if __name__ == "__main__":
    main(sys.argv[1])
