"""The implementations and the interface each one keeps.

``IMPLEMENTATIONS`` names each one's module (imported when asked for, so the CLI starts fast);
the module defines ``IMPLEMENTATION``, which keeps ``Implementation``. Adding a third (a
framework, or runs imported from another profiler) is its module and its line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from tracker.errors import unknown

if TYPE_CHECKING:
    from tracker.gpu.runner import Measured
    from tracker.gpu.workload import Workload
    from tracker.nets import Network
    from tracker.profilers.cupti_collector import Ranges
    from tracker.store import Store

IMPLEMENTATIONS = {  # run.implementation -> module; the first is the default
    "ours": "tracker.implementations.ours",
    "torch": "tracker.implementations.pytorch",
    "imported": "tracker.implementations.imported",
}
PROFILED = ("ours", "torch")  # what --impl runs; an imported run is read from a file (tracker import)

Echo = Callable[[str], None]


class Implementation(Protocol):
    name: str  # run.implementation
    by: str  # how a summary names who ran a run: '' (ours) or ' run by torch'

    def check(self, workload: Workload) -> None:
        """Refuse, in one line, an option of the workload that chooses among another's kernels."""
        ...

    def installed(self, what: str) -> None:
        """Raise BackendUnavailable, saying how to install it, unless what it runs with is here
        (the model backend predicts any implementation's network without it)."""
        ...

    def on_gpu(self, what: str) -> str:
        """Raise unless it can run on this machine's GPU (found already); return ', and how' or ''."""
        ...

    def check_network(self, net: Network, batch: int | None = None) -> None:
        """Refuse a network (at ``batch``, where given: before a GPU run) it cannot run."""
        ...

    def loaders(self, workload: Workload) -> str:
        """How its GEMM kernels fill shared memory (run.loaders)."""
        ...

    def recorded(self, workload: Workload, backend: str) -> dict | None:
        """What it runs with, recorded on the run (run.library): None for our kernels."""
        ...

    def plan(self, store: Store, workload: Workload, untuned: bool, echo: Echo) -> Workload:
        """The workload planned, once: pass 1 and pass 2 run these steps."""
        ...

    def planned(self, workload: Workload, untuned: bool) -> dict[str, str] | None:
        """'layer/phase' -> the variant of ours it runs (run.plan): the planned workload's steps, or
        on the model backend (no steps) the plan it would run; None where it runs no variants of ours."""
        ...

    def pass1(self, workload: Workload, echo: Echo) -> Measured:
        """Every launch of the measured iterations, timed, on this machine's GPU."""
        ...

    def child(self, workload: Workload) -> None:
        """Pass 2's child under a profiler: warm up, then the measured iterations between
        cudaProfilerStart and Stop (``child.py profiled``)."""
        ...

    def in_child(self, work: Callable[[], None]) -> None:
        """Run ``work`` as a child process's body, its one-line error where it fails."""
        ...

    def ranges(self, workload: Workload, metrics: list[str], most: int, echo: Echo) -> Ranges:
        """CUPTI's ranges of the measured iterations, each layer phase replayed per counter pass,
        in whichever process it must count in."""
        ...

    def replay(self, workload: Workload, metrics: list[str], most: int, echo: Echo) -> Ranges:
        """The same, counted in this process (``child.py counted`` runs it for ``ranges``)."""
        ...

    def refused_in_selftest(self, record: bool, tile: object, l1: str) -> str | None:
        """Why `tracker selftest` cannot take these options for it (None: it takes them)."""
        ...

    def selftest(self, cases: tuple, l1: str, tile: object, echo: Echo) -> tuple[list[dict], str, dict | None]:
        """Every case against the reference: (rows, the device in words, what a record needs)."""
        ...

    # What a stored run of it says (``run`` a row of the run table, as the store decodes it).

    def ran_by(self, run: Mapping) -> str | None:
        """Who ran it, in words ('PyTorch 2.9.1 (CUDA 12.8, ...)'); None for our kernels, which a
        report describes by their variants, tiles and L1 policy."""
        ...

    def legend(self, run: Mapping) -> str:
        """Whose kernels a run ran, in a figure's legend: 'ours', 'PyTorch 2.9.1 (cuDNN, cuBLAS)'."""
        ...

    def fill_command(self, run: Mapping, network_flags: str) -> str:
        """The command that gets the same workload's counters (a report's folded sections)."""
        ...


def implementation(name: str) -> Implementation:
    """The implementation ``name``; an unknown one is refused with the names there are."""
    if name not in IMPLEMENTATIONS:
        raise unknown("implementation", str(name), list(IMPLEMENTATIONS))
    found: Implementation = importlib.import_module(IMPLEMENTATIONS[name]).IMPLEMENTATION
    return found


def of_run(run: Mapping) -> Implementation:
    """The implementation that made a stored run (one recorded before there were others: ours)."""
    return implementation(run.get("implementation") or next(iter(IMPLEMENTATIONS)))


def checked(workload: Workload) -> Implementation:
    """The implementation that runs ``workload``, the options it was given checked against it."""
    chosen = implementation(workload.implementation)
    chosen.check(workload)
    return chosen
