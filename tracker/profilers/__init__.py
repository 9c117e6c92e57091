"""Counter collectors: pass 2 of a profile, one protocol.

A collector is given a planned workload and pass 1's launch log; it runs the same workload in a
child process under its profiler and returns the counters joined launch by launch
(tracker/profilers/join.py), or raises before anything is stored. Nsight Compute (``ncu``)
serves Volta and newer; ``nvprof`` the GPUs Nsight Compute does not support (compute
capability < 7.0, paper 003's K40 and GTX 1080).

``COLLECTORS`` names each collector's module, which defines ``supports(compute_capability)``
and ``find(options)`` (the collector, or BackendUnavailable saying why not): adding a third is
one module and its line here. Modules are imported when asked for, so the CLI starts fast.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol, Sequence

from tracker.errors import BackendUnavailable
from tracker.profilers.ncu import Settings as NcuSettings

if TYPE_CHECKING:
    from tracker.gpu.workload import Launch, Workload

COLLECTORS = {  # --backend name -> module; the first that supports a GPU is auto's choice
    "ncu": "tracker.profilers.ncu_collector",
    "nvprof": "tracker.profilers.nvprof_collector",
}


@dataclass(frozen=True)
class Options:
    """What the user asked of pass 2: ncu's settings, and where to keep the profiler's report."""

    ncu: NcuSettings = field(default_factory=NcuSettings)
    keep_report: str | None = None


@dataclass(frozen=True)
class Counters:
    rows: list[dict]  # (invocation, name, value), names from the metric catalog
    run_fields: dict  # what the run records of how they were collected (ncu_version, replay, ...)
    skipped: list[str]  # catalog metrics this GPU's profiler does not know
    note: str = ""  # a setting the profiler could not have, and what ran instead


class Collector(Protocol):
    name: str  # the run's backend
    version: str

    def describe(self) -> str:
        """'ncu 2025.3.1.0 at /usr/local/cuda/bin/ncu': why this collector, in the run's reason."""
        ...

    def collect(self, workload: Workload, launches: Sequence[Launch], compute_capability: float,
                echo: Callable[[str], None]) -> Counters:
        ...


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
