"""``tracker report``: paper 003's figures and tables for a run, a pair of runs or an experiment,
as PNG and SVG, with ``index.html`` and ``report.md`` and a one-line finding per figure computed
from the data. A run without counters gets the model's figures in full (predicted time per layer,
roofline, memory) and the sections that need counters folded into one line naming the command
that fills them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tracker.errors import TrackerError, shorten
from tracker.paths import check_dir, claim, mark
from tracker.report.document import Report, Section
from tracker.store import Store
from tracker.store.queries import is_experiment_ref

__all__ = ["Report", "Section", "build", "report", "subject", "write"]


def write(report: Report, out: Path, earlier: Sequence[Path] = ()) -> tuple[list[Path], list[Path]]:
    """Every figure as PNG and SVG, then index.html and report.md: (the paths written, the files of
    ``earlier``, what the same report wrote there before, that this one did not write, removed so
    that the folder shows this report alone; nothing else in ``out`` is touched)."""
    from tracker.figures import save
    from tracker.report.page import write_pages

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for s in report.sections:
        if s.figure is not None:
            for ext in ("png", "svg"):
                save(s.figure, out / f"{s.key}.{ext}")
                written.append(out / f"{s.key}.{ext}")
    written += write_pages(report, out)
    stale = sorted(set(earlier) - set(written))
    for path in stale:
        path.unlink()
    return written, stale


def build(store: Store, target: str, against: str | None = None) -> Report:
    """The report on a run ('3', 'last'), a run against another (``against``), or an experiment ('e2')."""
    from tracker.report.comparison_report import for_comparison
    from tracker.report.experiment_report import for_experiment
    from tracker.report.run_report import ReportedRun, for_run
    from tracker.store import find_experiment, find_run

    if is_experiment_ref(target):
        if against is not None:
            raise TrackerError(
                f"--against {shorten(against)} draws a run against a run; experiment "
                f"{shorten(target)}'s report compares its own arms: drop --against"
            )
        return for_experiment(store, find_experiment(store, target).id)
    run = ReportedRun.read(store, find_run(store, target).id)
    report = for_run(run)
    if against is not None:
        other = ReportedRun.read(store, find_run(store, against).id)
        report.heading = f"Run {run.id} against run {other.id}"
        report.sections = for_comparison(other, run) + report.sections
    return report


def subject(store: Store, target: str, against: str | None = None) -> tuple[str, str]:
    """What a report on ``target`` is, in words and as its default folder: ("run 1's report",
    "report-1"), ("run 4's report against run 3", "report-4-vs-3"), ("experiment e2's report",
    "report-e2"); 'last' is resolved, so each run's report has a folder of its own."""
    from tracker.store import find_experiment, find_run

    if is_experiment_ref(target):
        number = f"e{find_experiment(store, target).id}"
        return f"experiment {number}'s report", f"report-{number}"
    run = find_run(store, target).id
    if against is None:
        return f"run {run}'s report", f"report-{run}"
    other = find_run(store, against).id
    return f"run {run}'s report against run {other}", f"report-{run}-vs-{other}"


def report(
    store: Store, target: str, out: str | Path | None = None, against: str | None = None, force: bool = False
) -> tuple[list[Path], Report, list[Path]]:
    """Write the report on ``target`` into ``out`` (default: its own folder, ``subject``'s, in the
    current directory): (the paths written, the report, the files of the same report's earlier
    writing there that were removed). A folder holding another report, or other files, is
    refused unless ``force`` (tracker.paths.claim)."""
    if out is not None:
        out = check_dir(out)  # before the work: an unwritable --out fails in one line, not after the figures
    what, folder = subject(store, target, against)
    out = check_dir(folder) if out is None else out
    earlier = claim(out, what, store.where, force)
    built = build(store, target, against)
    written, removed = write(built, out, earlier)
    mark(out, what, store.where, written)
    return written, built, removed
