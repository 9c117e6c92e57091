"""Another tool's profile, read from its file by `tracker import` (tracker/importers): a run that
was measured elsewhere, so nothing here runs it. Every method that would run a workload refuses in
one line; what a stored run says (who ran it, its legend, how to get its counters) is the file's."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from tracker.errors import TrackerError

NOT_RUN = "an imported run is read from another tool's profile, not run: tracker import FILE"


@dataclass(frozen=True)
class ImportedRuns:
    name: str = "imported"
    by: str = " imported"

    def check(self, workload) -> NoReturn:
        raise TrackerError(NOT_RUN)

    def installed(self, what: str) -> NoReturn:
        raise TrackerError(NOT_RUN)

    def on_gpu(self, what: str) -> NoReturn:
        raise TrackerError(NOT_RUN)

    def check_network(self, net, batch: int | None = None) -> NoReturn:
        raise TrackerError(NOT_RUN)

    def loaders(self, workload) -> str:
        return self.name

    def recorded(self, workload, backend: str) -> NoReturn:
        raise TrackerError(NOT_RUN)

    def plan(self, store, workload, untuned: bool, echo) -> NoReturn:
        raise TrackerError(NOT_RUN)

    def planned(self, workload, untuned: bool) -> None:
        return None

    def pass1(self, workload, echo) -> NoReturn:
        raise TrackerError(NOT_RUN)

    def child(self, workload) -> NoReturn:
        raise TrackerError(NOT_RUN)

    def in_child(self, work: Callable[[], None]) -> NoReturn:
        raise TrackerError(NOT_RUN)

    def ranges(self, workload, metrics: list[str], most: int, echo) -> NoReturn:
        raise TrackerError(NOT_RUN)

    def replay(self, workload, metrics: list[str], most: int, echo) -> NoReturn:
        raise TrackerError(NOT_RUN)

    def refused_in_selftest(self, record: bool, tile: object, l1: str) -> str | None:
        return NOT_RUN

    def selftest(self, cases: tuple, l1: str, tile: object, echo) -> NoReturn:
        raise TrackerError(NOT_RUN)

    def ran_by(self, run: Mapping) -> str | None:
        """'another tool: profile.ncu-rep (ncu-rep, read by ncu-report 2026.3.1)'."""
        source = run.get("library") or {}
        return f"another tool: {Path(source.get('file', '?')).name} ({source.get('format')}, {source.get('tool')})"

    def legend(self, run: Mapping) -> str:
        return f"imported: {Path((run.get('library') or {}).get('file', '?')).name}"

    def fill_command(self, run: Mapping, network_flags: str) -> str:
        """How to get counters for what the run measured: its program under ncu, imported again."""
        return "ncu --set full -o profile PROGRAM, then tracker import profile.ncu-rep"


IMPLEMENTATION = ImportedRuns()
