"""Pass 2 with CUPTI's Range Profiler in tracker's own process: no profiler process, no
per-launch replay by a tool. Each layer phase of the counted iterations runs once per counter pass
from the same state (tracker/gpu/replay.py), each launch in it one range (auto range), and the
ranges are pass 1's launches of that layer phase in order (auto range numbers them and names no
kernel: their number is checked), then joined as ncu's are (tracker/profilers/join.py). The
metrics are the catalog's under ncu's names, which are perfworks' (``SOURCES``).

Auto range numbers the ranges '0', '1', ... on across layer phases (tests/data/gpu-2026-11-26d-h200),
which the join takes as launch order.
Asked for by name only (``--backend cupti``); ``auto`` keeps ncu, until the GPU suite has shown it
agrees with ncu's counts. The target's implementation replays (tracker/implementations): ours in
this process, PyTorch's in a child that loads this libcupti before PyTorch loads its own, the
autograd engine's gradient sums inside its layer phases joined as pass 1 gives them to their
layer phase.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING, Any

from tracker.errors import JoinError
from tracker.profilers import Counters, Options, Profiled, ncu
from tracker.profilers.join import join

if TYPE_CHECKING:
    from tracker.gpu.workload import LoggedLaunch

SOURCES = ncu.SOURCES  # CUPTI's profiler takes perfworks' metric names: ncu's
FIRST_CC = 7.0  # the Profiling API's architectures (CUpti_Profiler_DeviceSupported_Params)


def supports(compute_capability: float) -> bool:
    return compute_capability >= FIRST_CC


def find(options: Options) -> CuptiCollector:
    """libcupti, found; BackendUnavailable in one line saying what to install."""
    from tracker.profilers import cupti_range

    cupti_range.library()
    return CuptiCollector(cupti_range.describe_library())


# What a session counted: each layer phase's ranges (name, values; one per launch, in launch order), the
# metrics CUPTI does not know, and how it counted (run.collector_settings)
Phase = tuple[str, list[tuple[str, dict[str, float]]]]  # 'layer/phase', its ranges
Ranges = tuple[list[Phase], list[str], dict[str, Any]]


@dataclass(frozen=True)
class CuptiCollector:
    version: str  # the libcupti's (cupti_range.describe_library)
    name: str = "cupti"

    def describe(self) -> str:
        return f"CUPTI's range profiler, each layer phase replayed per pass ({self.version})"

    def collect(
        self, target: Profiled, launches: Sequence[LoggedLaunch], compute_capability: float, echo: Callable[[str], None]
    ) -> Counters:
        """Counters for ``launches`` (pass 1's of the iterations ``target`` measures), every
        layer phase replayed until the profiler has all its passes (by the target's
        implementation, in whichever process it must count in)."""
        from tracker.profilers.ncu_csv import ProfiledLaunch

        metrics = SOURCES.requested(compute_capability)
        most = max(Counter((k.range, k.repeat) for k in launches).values(), default=1)  # the ranges of one pass
        echo(
            f"pass 2: CUPTI's range profiler, {len(metrics)} metrics, {len(launches)} launches, "
            f"each layer phase replayed per pass"
        )
        phases, skipped, settings = target.ranges(metrics, most, echo)
        if skipped:
            echo(f"CUPTI does not know {len(skipped)} catalog metrics on this GPU: {', '.join(skipped)}")
        profiled = [
            ProfiledLaunch(i, launch.kernel_name, metrics=SOURCES.translate(values))
            for i, (launch, values) in enumerate(_counted(launches, phases))
        ]
        rows = join(launches, profiled, None)
        return Counters(
            rows,
            dict(collector_version=self.version, collector_settings=settings),
            SOURCES.names({row["name"] for row in rows}),
            skipped,
        )


def _in_launch_order(names: list[str]) -> bool:
    """Whether ``names`` are auto range's: consecutive numbers. The numbering runs on across a
    session's counter images (conv1's forward's two launches '0' and '1', relu1's '2')."""
    if not all(name.isdecimal() for name in names):
        return False
    numbers = [int(name) for name in names]
    return numbers == list(range(numbers[0], numbers[0] + len(numbers))) if numbers else True


def _counted(launches: Sequence[LoggedLaunch], phases: list[Phase]) -> list[tuple[LoggedLaunch, dict[str, float]]]:
    """Each of pass 1's launches with the values of its range. Auto range numbers the ranges in
    launch order ('0', '1', ..., on across phases) and names no kernel, so a phase's ranges
    are pass 1's launches of that layer phase and iteration, one for one: their number is what is
    checked (and, by ``join``, that every launch has its range)."""
    logged = [list(group) for _, group in groupby(launches, key=lambda k: (k.range, k.repeat))]
    pairs: list[tuple[LoggedLaunch, dict[str, float]]] = []
    for phase, ranges in phases:
        if logged and logged[0][0].range == phase:
            group = logged.pop(0)
        elif not ranges:
            continue  # a layer phase that launched nothing in either pass
        else:
            raise JoinError(f"{phase}: CUPTI counted {len(ranges)} ranges where pass 1 launched nothing")
        names = [name for name, _ in ranges]
        if not _in_launch_order(names):
            raise JoinError(f"{phase}: CUPTI named its ranges {names[:4]}, not by launch order (auto range)")
        if len(ranges) != len(group):
            raise JoinError(
                f"{phase} (iteration {group[0].repeat + 1}): pass 1 launched {len(group)} kernels, "
                f"CUPTI counted {len(ranges)} ranges"
            )
        pairs += [(launch, values) for launch, (_, values) in zip(group, ranges)]
    if logged:
        raise JoinError(
            f"{logged[0][0].range} (iteration {logged[0][0].repeat + 1}): pass 1 launched "
            f"{len(logged[0])} kernels, CUPTI counted none"
        )
    return pairs
