"""Commands that read what runs and experiments stored: compare, agree, report, export."""

from __future__ import annotations

import click

from tracker.cli.options import db_option, emit, format_option
from tracker.cli.output import records
from tracker.export import FORMATS as EXPORT_FORMATS
from tracker.phases import PHASE_SETS
from tracker.timeline import FORMATS as TIMELINE_FORMATS

SPEEDUP_COLUMNS = (
    "comparison",
    "arm",
    "layer",
    "phase",
    "a_ms",
    "b_ms",
    "spread_pct_a",
    "spread_pct_b",
    "speedup",
    "change_pct",
    "noise",
)


@click.command()
@click.argument("run_a")
@click.argument("run_b")
@click.option(
    "--phases",
    type=click.Choice(list(PHASE_SETS)),
    default="both",
    show_default=True,
    help="Compare these phases only: fwd sets a forward-only run (an imported inference trace) "
    "against the forward of a training run.",
)
@db_option
@format_option
def compare(run_a, run_b, phases, db, fmt):
    """Per-layer speedup of RUN_B over RUN_A, and how the counters changed.

    Speedup = RUN_A's time / RUN_B's time (above 1: RUN_B is faster). Refuses runs whose layers or
    phases differ, a measured run against a model run, or a run against itself. Two GPUs: profile
    the same network on each (or into one database) and compare; two batch sizes: the same, and the
    times are then per image (each divided by its run's batch), as the header line says.

    \b
    Examples:
      tracker compare 3 4
      tracker compare 3 4 --format csv > speedup.csv
      tracker compare 1 7 --phases fwd     # an imported PyTorch trace of the forward against run 1
    """
    from tracker.analysis.speedup import basis, comparison
    from tracker.store import find_run, open_store

    store = open_store(db, write=False)
    a, b = find_run(store, run_a).id, find_run(store, run_b).id
    rows = records(comparison(store, a, b, phases))
    if fmt == "table":
        per = basis(store, a, b)
        by = {run: find_run(store, run).implementation for run in (a, b)}
        who = f" ({by[b]} against {by[a]})" if by[a] != by[b] else ""
        click.echo(
            f"run {b} against run {a}{who}: speedup = run {a} time / run {b} time, {per}"
            f"{' (the batch sizes differ)' if per == 'per image' else ''}; "
            "noise: the runs' ranges over their iterations overlap"
        )
        emit(
            rows,
            fmt,
            [
                c
                for c in SPEEDUP_COLUMNS[2:]
                + (
                    "algorithm_a",
                    "algorithm_b",
                    "first_reason_a",
                    "first_reason_b",
                    "l1_hit_rate_change",
                    "l2_hit_rate_change",
                    "fp32_inst_change",
                )
                if any(r.get(c) is not None for r in rows)
            ],
        )
        return
    emit(rows, fmt)


@click.command()
@click.argument("run_a")
@click.argument("run_b")
@db_option
@click.option(
    "--db-b",
    metavar="PATH|URL",
    default=None,
    help="RUN_B's trace database, where it is not --db's (two machines, two files).",
)
@format_option
def agree(run_a, run_b, db, db_b, fmt):
    """Whether two runs' counters agree, launch by launch and metric by metric.

    For one workload counted by two collectors (--backend cupti against --backend ncu), or twice by
    one (how far each metric moves from run to run at all). A count (instructions, sectors, bytes)
    agrees within 5 %, a rate, ratio, clock or time within 10 %, each relative to the larger value
    or to 0.1 % of the metric's largest over the launches, whichever is more; a count's totals over
    the launches are compared too (total_diff). Refuses runs that launch different kernels.

    \b
    Examples:
      tracker agree 1 2
      tracker agree 1 1 --db h100.db --db-b h100-again.db --format csv
    """
    from tracker.analysis.agreement import agreement
    from tracker.store import find_run, open_store

    store = open_store(db, write=False)
    other = open_store(db_b, write=False) if db_b else store
    a, b = find_run(store, run_a).id, find_run(other, run_b).id
    if other is store and a == b:
        raise click.UsageError("RUN_A and RUN_B are the same run: name two (or --db-b for RUN_B's database)")
    table = agreement(store, a, b, other)
    rows = records(table)
    if fmt == "table":
        agreed = int(table["agrees"].sum())
        click.echo(
            f"run {b} against run {a}: {agreed} of {len(table)} metrics agree at every launch "
            "(counts within 5 %, rates within 10 %)"
        )
        for row in rows:
            for column in ("within", "median_diff", "worst_diff", "total_diff"):
                row[column] = None if row[column] is None else f"{100 * row[column]:.1f} %"
        emit(
            rows,
            fmt,
            [
                "metric",
                "kind",
                "launches",
                "within",
                "median_diff",
                "worst_diff",
                "worst_at",
                "a_at_worst",
                "b_at_worst",
                "total_diff",
                "agrees",
            ],
        )
        return
    emit(rows, fmt)


FORCE_HELP = "Write into --out even where it holds another run's output or files tracker did not write."


@click.command()
@click.argument("target", default="last", metavar="RUN|EXPERIMENT")
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Directory for the figures and pages. Default: the report's own, in the current directory: "
    "report-1 for run 1, report-e2 for experiment e2, report-4-vs-3 with --against 3.",
)
@click.option(
    "--against",
    default=None,
    metavar="RUN",
    help="Also draw TARGET's speedup over this run (paper 003 Figure 8: two GPUs, two batch sizes).",
)
@click.option("--force", is_flag=True, help=FORCE_HELP)
@db_option
def report(target, out, against, force, db):
    """Paper 003's figures and tables for a run or an experiment, with a finding per figure.

    RUN is a run id or 'last'; EXPERIMENT is an experiment id written e2 (see `tracker
    experiments`). Writes each figure as PNG and SVG, index.html and report.md into a folder of
    the report's own (--out to choose another). Figures the run has no data for (no counters
    without ncu) are listed with the reason. A folder that holds another report is refused
    unless --force; the same report written again updates its folder.

    \b
    Examples:
      tracker report 3
      tracker report e2
      tracker report 4 --against 3 --out h100-vs-a100/
    """
    from pathlib import Path

    from tracker import units
    from tracker.paths import check_dir
    from tracker.report import report as write_report
    from tracker.store import open_store

    if out is not None:
        out = check_dir(out)  # before the database: an unwritable --out opens nothing
    store = open_store(db, write=False)
    written, built, removed = write_report(store, target, out, against, force)
    out = written[0].parent
    drawn = sum(s.figure is not None for s in built.sections)
    if removed:
        click.echo(f"  removed {units.count_of(len(removed), 'figure file')} an earlier report left in {out}", err=True)
    click.echo(
        f"{units.count_of(drawn, 'figure')} of {units.count_of(len(built.sections), 'section')} in {out}; "
        f"open {Path(out) / 'index.html'}"
    )
    if built.unfinished:
        click.echo(f"  {built.unfinished}")
    for s in built.sections:
        if s.empty:
            click.echo(f"  {s.title}: left out, nothing to show ({s.missing})")
        elif not s.folded:
            click.echo(f"  {s.title}: {s.finding}" + (f" [not drawn: {s.missing}]" if s.missing else ""))
    folded = [s.title for s in built.sections if s.folded]
    if folded:
        click.echo(
            f"  not collected (no counters): {', '.join(folded)}; fill them with `{built.fill_command}` on a GPU"
        )


@click.command()
@click.argument("run", default="last")
@click.option(
    "--out",
    type=click.Path(),
    default=None,
    help="Where to write. csv, parquet: a folder (default: the run's own in the current directory, export-1 for "
    "run 1). perfetto, chrome: a file (default: run-1.pftrace, run-1.json; e2.pftrace for experiment e2).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice((*EXPORT_FORMATS, *TIMELINE_FORMATS)),
    default="csv",
    show_default=True,
    help="csv or parquet: the run's views and tables. perfetto (Perfetto's protobuf) or chrome (the Trace Event "
    "JSON that chrome://tracing and Perfetto read): a timeline of iterations, layers, phases and launches, with a "
    "counter track per stored metric.",
)
@click.option("--force", is_flag=True, help=FORCE_HELP + " A timeline file that exists is overwritten only with it.")
@db_option
def export(run, out, fmt, force, db):
    """One run as files: its views and tables (CSV, Parquet), or a timeline for Perfetto's UI.

    With --format perfetto or chrome, RUN may also be an experiment (e2): each arm's run is a
    process of one timeline, all starting at 0. Open the file at https://ui.perfetto.dev (or
    chrome://tracing for chrome). A run that stored durations only (our kernels on CUDA events)
    has its launches laid end to end in invocation order, and its process says so.

    \b
    Examples:
      tracker export 3
      tracker export last --format parquet --out run3/
      tracker export 3 --format perfetto
      tracker export e2 --format chrome --out arms.json
    """
    if fmt in TIMELINE_FORMATS:
        _export_timeline(run, out, fmt, force, db)
        return
    from tracker.export import export as write_export
    from tracker.paths import check_dir
    from tracker.store import find_run, open_store

    if out is not None:
        out = check_dir(out)  # before the database: an unwritable --out opens nothing
    store = open_store(db, write=False)
    written = write_export(store, find_run(store, run).id, out, fmt, force)
    click.echo(f"{len(written)} files in {written[0].parent}")


def _export_timeline(target: str, out: str | None, fmt: str, force: bool, db: str | None) -> None:
    from tracker.store import open_store
    from tracker.timeline import walk, write

    path, processes = write(open_store(db, write=False), target, out, fmt, force)
    slices = sum(1 for p in processes for _ in walk(p.slices))
    counters = sum(len(p.counters) for p in processes)
    click.echo(f"{path}: {len(processes)} process(es), {slices} slices, {counters} counter tracks")
    for p in processes:
        if p.note:
            click.echo(f"  {p.name}: {p.note}")
    click.echo("  open it at https://ui.perfetto.dev" + (" or chrome://tracing" if fmt == "chrome" else ""))
