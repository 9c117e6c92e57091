"""``tracker report``: paper 003's figures and tables for a run, a pair of runs or an experiment,
as PNG and SVG, with ``index.html`` and ``report.md`` and a one-line finding per figure computed
from the data. A run without counters gets the model's figures in full (predicted time per layer,
roofline, memory) and the sections that need counters folded into one line naming the command
that fills them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from tracker.errors import TrackerError, shorten
from tracker.paths import check_dir
from tracker.store import Store


@dataclass
class Section:
    key: str  # file stem and anchor
    title: str
    paper: str  # which paper-003 figure it redraws
    figure: object | None  # matplotlib Figure
    finding: str
    table: pd.DataFrame | None = None
    missing: str | None = None  # why there is no figure
    needs_counters: bool = False  # empty because the run has no hardware counters

    @property
    def folded(self) -> bool:
        """Shown only as a name in the page's 'not collected' line."""
        return self.needs_counters and self.figure is None

    @property
    def empty(self) -> bool:
        """Nothing to show (no figure, finding or table row): left out, named with why in one line."""
        return (not self.needs_counters and self.figure is None and not self.finding
                and (self.table is None or self.table.empty))


@dataclass
class Report:
    heading: str
    summary: str  # the header in words: network, batch, GPU, backend, variants, L1, ncu, repeats, when
    about: dict  # the settings behind it, one row each
    sections: list[Section] = field(default_factory=list)
    fill_command: str = ""  # the command that collects the counters folded sections need
    unfinished: str | None = None  # what a run that did not complete holds (tracker.profilers.unfinished)

    def __post_init__(self) -> None:
        # A section's key names its figure's files and its anchor: two alike would draw one figure
        # over the other (a fusion experiment's pairs and speedups did, 2026-11-25).
        keys = [s.key for s in self.sections]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:
            raise ValueError(f"report sections share the key(s) {', '.join(repeated)}")


PAGES = ("index.html", "report.md")
FIGURE_FILES = ("*.png", "*.svg")


def write(report: Report, out: Path) -> tuple[list[Path], list[Path]]:
    """Every figure as PNG and SVG, then index.html and report.md: (the paths written, the figure
    files an earlier report left in ``out`` that this one did not write, removed so that the folder
    shows this report alone; only in a folder with a report's pages, so nothing else is touched)."""
    from tracker.figures import save
    from tracker.report.page import write_pages

    out.mkdir(parents=True, exist_ok=True)
    earlier = ({p for pattern in FIGURE_FILES for p in out.glob(pattern)}
               if any((out / page).exists() for page in PAGES) else set())
    written = []
    for s in report.sections:
        if s.figure is not None:
            for ext in ("png", "svg"):
                save(s.figure, out / f"{s.key}.{ext}")
                written.append(out / f"{s.key}.{ext}")
    stale = sorted(earlier - set(written))
    for path in stale:
        path.unlink()
    return written + write_pages(report, out), stale


def build(store: Store, target: str, against: str | None = None) -> Report:
    """The report on a run ('3', 'last'), a run against another (``against``), or an experiment ('e2')."""
    from tracker.report import sections
    from tracker.store import find_experiment, find_run

    if target.lower().startswith("e") and target.lower() not in ("last", "latest"):
        if against is not None:
            raise TrackerError(f"--against {shorten(against)} draws a run against a run; experiment "
                               f"{shorten(target)}'s report compares its own arms: drop --against")
        return sections.for_experiment(store, find_experiment(store, target).id)
    run = sections.Run.read(store, find_run(store, target).id)
    report = sections.for_run(run)
    if against is not None:
        other = sections.Run.read(store, find_run(store, against).id)
        report.heading = f"Run {run.id} against run {other.id}"
        report.sections = sections.for_comparison(other, run) + report.sections
    return report


def report(store: Store, target: str, out: str | Path,
           against: str | None = None) -> tuple[list[Path], Report, list[Path]]:
    """Write the report on ``target`` into ``out``: (the paths written, the report, the figure files
    of an earlier report there that were removed)."""
    out = check_dir(out)  # before the work: an unwritable --out fails in one line, not after the figures
    built = build(store, target, against)
    written, removed = write(built, out)
    return written, built, removed
