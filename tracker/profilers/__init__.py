"""Counter collectors: pass 2 of a profile, one protocol.

A collector is given what to profile (a ``Profiled``: the planned workload as its implementation
runs it, tracker/implementations) and pass 1's launch log; it runs the target's child process
under its profiler (or, for CUPTI, has the target replay each layer phase per counter pass) and
returns the counters joined launch by launch (tracker/profilers/join.py), or raises before
anything is stored. It never asks who runs the workload. Nsight Compute (``ncu``)
serves Volta and newer; ``nvprof`` the GPUs Nsight Compute does not support (compute
capability < 7.0, paper 003's K40 and GTX 1080).

Pass 2 replays each launch once per counter pass (18 on an H100), so it profiles the first
``Options.iterations`` measured iterations only (one by default), while pass 1 times every one:
``counted`` gives the workload the child runs and the launches of pass 1 it joins onto.

``COLLECTORS`` names each collector's module, which defines ``supports(compute_capability)``,
``find(options)`` (the collector, or BackendUnavailable saying why not) and ``SOURCES`` (its names
for the catalog's metrics, ``tracker.metrics.Sources``): adding a third is its module and its line
here. Modules are imported when asked for, so the CLI starts fast.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from tracker.errors import BackendUnavailable, TrackerError
from tracker.gpu.workload import MAX_REPEAT
from tracker.kernel_names import is_transfer
from tracker.profilers.ncu import Settings as NcuSettings

if TYPE_CHECKING:
    from tracker.gpu.workload import LoggedLaunch, Workload
    from tracker.metrics import Sources
    from tracker.profilers.cupti_collector import Ranges

COLLECTORS = {  # --backend name -> module; the first that supports a GPU is auto's choice
    "ncu": "tracker.profilers.ncu_collector",
    "nvprof": "tracker.profilers.nvprof_collector",
    "cupti": "tracker.profilers.cupti_collector",  # last: by name only until it agrees with ncu on a GPU
}


@dataclass(frozen=True)
class Options:
    """What the user asked of pass 2: ncu's settings, where to keep the profiler's report, and
    from how many measured iterations to collect counters (the first ones; at most the workload's
    repeat, which ``tracker.profile.check_options`` checks where both are known)."""

    ncu: NcuSettings = field(default_factory=NcuSettings)
    keep_report: str | None = None
    iterations: int = 1  # --counter-iterations

    def __post_init__(self) -> None:
        if (
            isinstance(self.iterations, bool)
            or not isinstance(self.iterations, int)
            or not 1 <= self.iterations <= MAX_REPEAT
        ):
            raise TrackerError(f"counter iterations {self.iterations!r} is out of range 1..{MAX_REPEAT}")


@dataclass(frozen=True)
class Counters:
    rows: list[dict]  # (invocation, name, value), names from the metric catalog
    run_fields: dict  # how they were collected: the run's collector_version and collector_settings
    sources: dict[str, str]  # the collector's own name of each catalog metric in rows (metric_source)
    skipped: list[str]  # catalog metrics this GPU's profiler does not know
    note: str = ""  # a setting the profiler could not have, and what ran instead


class Profiled(Protocol):
    """What pass 2 profiles: the planned workload, as its implementation runs it
    (``tracker.implementations.child.ProfiledWorkload``)."""

    @property
    def workload(self) -> Workload: ...

    def command(self) -> list[str]:
        """The child process a profiler wraps."""
        ...

    def ranges(self, metrics: list[str], most: int, echo: Callable[[str], None]) -> Ranges:
        """CUPTI's ranges of the measured iterations, each layer phase replayed per counter pass."""
        ...


class Collector(Protocol):
    name: str  # the run's backend
    version: str

    def describe(self) -> str:
        """'ncu 2025.3.1.0 at /usr/local/cuda/bin/ncu': why this collector, in the run's reason."""
        ...

    def collect(
        self, target: Profiled, launches: Sequence[LoggedLaunch], compute_capability: float, echo: Callable[[str], None]
    ) -> Counters: ...


def counted(
    workload: Workload, launches: Sequence[LoggedLaunch], iterations: int
) -> tuple[Workload, list[LoggedLaunch]]:
    """What pass 2 runs and joins onto: the workload with only its first ``iterations`` measured
    iterations, and pass 1's kernels of those iterations (the first in invocation order, so the
    join's order and invocations are pass 1's own). The other iterations' launches, and the copies
    and fills a library's trace logs (no kernel profiler counts them), keep their times and carry
    no counters."""
    return workload.measuring(iterations), [
        launch for launch in launches if launch.repeat < iterations and not is_transfer(launch.kernel_name)
    ]


def iterations_profiled(iterations: int, repeat: int) -> str:
    """The measured iterations pass 2 profiles, in words: 'the first of 5 measured iterations',
    'the first 2 of 5 ...', 'all 3 ...', 'the one measured iteration'."""
    if repeat == 1:
        return "the one measured iteration"
    if iterations >= repeat:
        return f"all {repeat} measured iterations"
    return f"the first {'' if iterations == 1 else f'{iterations} '}of {repeat} measured iterations"


def unfinished(run: Mapping, launches: int) -> str | None:
    """What a run that did not complete holds, in one sentence (``tracker show``, the report):
    pass 1's launches are stored as it ends, counters only when pass 2 ends (``counter_iterations``
    set with them). None for a complete run, or one still running."""
    status = run["status"]
    if status in ("complete", "running"):
        return None
    detail = (run.get("error") or "").removeprefix(status).strip()  # 'interrupted (Ctrl-C or SIGTERM)'
    ended = ("this run failed" if status == "failed" else f"this run was {status}") + (
        "" if not detail else f" {detail}" if detail.startswith("(") else f" ({detail})"
    )
    if run["backend"] == "model":
        return ended
    if not launches:
        return f"{ended} before pass 1 stored any launch: it holds no measurement"
    if run["backend"] in COLLECTORS and run.get("counter_iterations") is None:
        return (
            f"{ended} before pass 2 ({run['backend']}) stored its counters: pass 1's {launches} launches and "
            "their event times are kept, and it has no counters"
        )
    return f"{ended} after storing its {launches} launches"


def sources(name: str) -> Sources:
    """The collector ``name``'s names for the catalog's metrics."""
    found: Sources = importlib.import_module(COLLECTORS[name]).SOURCES
    return found


def supports(name: str, compute_capability: float) -> bool:
    return bool(importlib.import_module(COLLECTORS[name]).supports(compute_capability))


def find(name: str, options: Options = Options()) -> Collector:
    """The collector ``name``, found on this machine; BackendUnavailable says why not."""
    collector: Collector = importlib.import_module(COLLECTORS[name]).find(options)
    return collector


def for_device(compute_capability: float | None) -> str:
    """The collector for a GPU of this compute capability (ncu where it is unknown)."""
    if compute_capability is None:
        return next(iter(COLLECTORS))
    found = next((name for name in COLLECTORS if supports(name, compute_capability)), None)
    if found is None:
        raise BackendUnavailable(f"no counter collector supports compute capability {compute_capability}")
    return found
