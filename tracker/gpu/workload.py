"""The workload that pass 2 runs in a child process under a profiler: the same plan, the same
warm-up and the same measured iterations (between cudaProfilerStart/Stop) as pass 1, so the
profiled launches line up with pass 1's log one for one.

``python -m tracker.gpu.workload '<json spec>'``; the spec is ``Workload.to_json()``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Workload:
    network: str
    options: dict = field(default_factory=dict)
    batch: int = 1
    variants: dict = field(default_factory=dict)
    phases: str = "both"
    l1_bypass: bool = False
    repeat: int = 1
    warmup: int = 1
    tiles: dict = field(default_factory=dict)  # 'layer/phase' -> tuned GEMM tile (tracker tune)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def program(self) -> list[str]:
        """The child's command line."""
        return [sys.executable, "-m", "tracker.gpu.workload", self.to_json()]


def main(spec: str) -> None:
    import cupy as cp

    from tracker.gpu.cupy_backend import CupyBackend
    from tracker.gpu.network import Executor
    from tracker.gpu.runner import measure
    from tracker.nets import build

    w = Workload(**json.loads(spec))
    policy = "cg" if w.l1_bypass else "ca"
    run = Executor(CupyBackend(policy, timed=False), build(w.network, **w.options), w.batch, w.variants, w.phases,
                   tiles=w.tiles)
    measure(run, w.repeat, w.warmup, policy, lambda line: print(line, file=sys.stderr),
            around=(cp.cuda.profiler.start, cp.cuda.profiler.stop))


if __name__ == "__main__":
    main(sys.argv[1])
