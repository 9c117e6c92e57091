"""Pass 2 with CUPTI's Range Profiler in tracker's own process (issue 47): no profiler process, no
per-launch replay by a tool. Each layer phase of the counted iterations runs once per counter pass
from the same state (tracker/gpu/replay.py), each launch in it one range (auto range), and the
ranges are joined onto pass 1's launches as ncu's are (tracker/profilers/join.py: position is
invocation, and the kernel's name must match). The metrics are the catalog's under ncu's names,
which are perfworks' (``SOURCES``).

**Never profiled a launch on a GPU yet** (an H200 stopped it at the host side: cupti_session.py).
Asked for by name only (``--backend cupti``); ``auto`` keeps ncu, until the GPU suite has shown it
agrees with ncu's counts. Our kernels only, so far: the library arm's
steps replay per pass (``TorchStep.iteration(passes)``, ``ModuleStep``'s), but nothing drives them
under a session yet. That needs a child process that loads this libcupti before PyTorch loads its
own, and a join that leaves out the launches pass 1 saw outside every range (the autograd engine's
gradient accumulations, which run inside a replayed phase's passes).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from tracker.errors import BackendUnavailable
from tracker.profilers import Counters, Options, ncu
from tracker.profilers.join import join

if TYPE_CHECKING:
    from tracker.gpu.workload import Launch, Workload

SOURCES = ncu.SOURCES  # CUPTI's profiler takes perfworks' metric names: ncu's
FIRST_CC = 7.0  # the Profiling API's architectures (CUpti_Profiler_DeviceSupported_Params)
SETTINGS = {"range": "auto", "replay": "user", "cache_control": "all"}  # what run.collector_settings records


def supports(compute_capability: float) -> bool:
    return compute_capability >= FIRST_CC


def find(options: Options) -> CuptiCollector:
    """libcupti and cupti-python, found; BackendUnavailable in one line saying what to install."""
    from importlib.metadata import PackageNotFoundError, version

    from tracker.profilers import cupti_range

    cupti_range.library()
    try:
        found = version("cupti-python")
    except PackageNotFoundError:
        raise BackendUnavailable("the CUPTI collector needs cupti-python: pip install -e '.[cupti]'") from None
    return CuptiCollector(found)


def _cupy(l1_policy: str) -> Any:
    from tracker.gpu.cupy_backend import CupyBackend

    return CupyBackend(l1_policy, timed=False)


def _session(metrics: list[str], most: int) -> Any:
    from tracker.profilers.cupti_session import RangeSession

    return RangeSession(metrics, max_ranges=most)


@dataclass(frozen=True)
class CuptiCollector:
    version: str  # cupti-python's
    name: str = "cupti"
    # how it runs the workload and counts: our kernels on CuPy, a CUPTI session (tests: the emulation, a stand-in)
    backend: Callable[[str], Any] = field(default=_cupy, compare=False)
    session: Callable[[list[str], int], Any] = field(default=_session, compare=False)

    def describe(self) -> str:
        return f"CUPTI's range profiler in this process (cupti-python {self.version})"

    def collect(self, workload: Workload, launches: Sequence[Launch], compute_capability: float,
                echo: Callable[[str], None]) -> Counters:
        """Counters for ``launches`` (pass 1's of the iterations ``workload`` measures), every
        layer phase replayed until the profiler has all its passes."""
        from tracker.gpu.network import Executor
        from tracker.gpu.replay import replay_step
        from tracker.profilers.ncu_csv import ProfiledLaunch

        if workload.library:
            raise BackendUnavailable("the CUPTI collector replays our kernels only so far: use --backend ncu")
        metrics = SOURCES.requested(compute_capability)
        executor = Executor.of(self.backend(workload.l1_policy), workload)
        executor.iteration()  # compiled and run once before anything is counted, as pass 1's warm-up
        per_step = Counter((r.context.layer.name, r.context.phase) for r in executor.b.log if r.context is not None)
        most = max(per_step.values(), default=1)  # a step's launches: the ranges of one pass
        echo(f"pass 2: CUPTI's range profiler, {len(metrics)} metrics, {len(launches)} launches, "
             f"each layer phase replayed per pass")
        profiled: list[ProfiledLaunch] = []
        with self.session(metrics, most) as session:
            for _ in range(workload.repeat):
                for step in executor.steps:
                    session.begin()
                    replay_step(executor, step, session)
                    profiled += [ProfiledLaunch(len(profiled), name, metrics=SOURCES.translate(values))
                                 for name, values in session.ranges()]
            skipped = list(session.skipped)
        if skipped:
            echo(f"CUPTI does not know {len(skipped)} catalog metrics on this GPU: {', '.join(skipped)}")
        rows = join(launches, profiled, None)
        return Counters(rows, dict(collector_version=self.version, collector_settings=dict(SETTINGS)),
                        SOURCES.names({row["name"] for row in rows}), skipped)
