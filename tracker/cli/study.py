"""Commands that study runs: experiment, experiments, compare, report, export."""

from __future__ import annotations

import click

from tracker.cli import cli
from tracker.cli.catalog import device_option
from tracker.cli.options import db_option, emit, format_option, net_kwargs, ncu_options, network_options
from tracker.experiment import KINDS
from tracker.export import FORMATS as EXPORT_FORMATS
from tracker.model.roofline import MAX_BATCH
from tracker.profile import BACKENDS, MAX_REPEAT, MAX_WARMUP

SPEEDUP_COLUMNS = ("comparison", "arm", "layer", "phase", "a_ms", "b_ms", "spread_pct_a", "spread_pct_b", "speedup",
                   "change_pct", "noise")
BATCH_COLUMNS = ("batch", "layer", "phase", "ms", "spread_pct", "ms_per_image", "source")


def _batches(ctx, param, value: str | None) -> tuple[int, ...]:
    if not value:
        return ()
    try:
        sizes = tuple(int(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter(f"'{value}' is not a comma-separated list of batch sizes (e.g. 16,64,128)") from None
    if any(not 1 <= b <= MAX_BATCH for b in sizes) or len(set(sizes)) != len(sizes):
        raise click.BadParameter(f"batch sizes must be distinct, from 1 to {MAX_BATCH}")
    return sizes


def _records(frame) -> list[dict]:
    """DataFrame rows as plain dicts (NaN -> None) for the renderers."""
    return [{k: (None if v is None or (isinstance(v, float) and v != v) else v) for k, v in row.items()}
            for row in frame.to_dict("records")]


@cli.command()
@click.argument("kind", type=click.Choice(KINDS))
@click.argument("network")
@click.option("--batch", "-b", type=click.IntRange(1, MAX_BATCH), default=128, show_default=True,
              help="Images per mini-batch.")
@click.option("--batches", callback=_batches, default=None, metavar="B,B,...",
              help="batch: the batch sizes to run (e.g. 16,64,128; the first is the baseline).")
@db_option
@click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
              help="As for tracker profile; only batch runs on the model backend.")
@click.option("--repeat", type=click.IntRange(1, MAX_REPEAT), default=5, show_default=True,
              help="Measured iterations per run: the spread that tells a speedup from noise.")
@click.option("--warmup", type=click.IntRange(0, MAX_WARMUP), default=1, show_default=True)
@ncu_options
@device_option
@network_options
@format_option
def experiment(kind, network, batch, batches, db, backend, repeat, warmup, clock_control, cache_control, device, fmt,
               **kwargs):
    """Run a set of profiles that answers one question, and print per-layer speedups.

    \b
    KIND:
      l1-bypass  every kernel variant with and without the L1-bypass build, per variant
      fusion     conv/fc + separate ReLU against the fused kernels, per fused pair
      variants   global, constant, shared, gemm and fused kernels against global
      batch      runtime per layer at each of --batches (model backend: with --device)
      library    our kernels (tuned) against PyTorch's cuDNN and cuBLAS (--impl torch),
                 with the algorithm cuDNN ran per layer phase
      algorithms direct, implicit GEMM, explicit GEMM and Winograd convolutions against the
                 default, per conv layer phase, with the algorithm that ran, its workspace
                 (the model's) and a library run's choice where one is stored (paper 004)
    A speedup is 'noise' when the two runs' ranges over their --repeat iterations overlap.

    \b
    Examples:
      tracker experiment l1-bypass alexnet --batch 128
      tracker experiment fusion alexnet --batch 128 --repeat 10
      tracker experiment batch alexnet --batches 16,64,128
      tracker experiment batch alexnet --batches 16,128 --backend model --device h100
      tracker experiment library alexnet --batch 128 --backend events
      tracker experiment algorithms alexnet --batch 128
    """
    from tracker.analysis.experiments import results
    from tracker.experiment import run_experiment
    from tracker.profilers.ncu import Settings as NcuSettings
    from tracker.model import lookup
    from tracker.nets import build
    from tracker.store import open_store

    net = build(network, **net_kwargs(kwargs))
    gpu = lookup(device) if device else None
    if kind == "batch" and not batches:
        batches = (batch,)
    say = (lambda line: click.echo(line, err=True)) if fmt != "table" else click.echo
    experiment_id = run_experiment(db, kind, net, batch, batches=batches, backend=backend, repeat=repeat,
                                   warmup=warmup, device=gpu, echo=say,
                                   ncu=NcuSettings(cache_control=cache_control, clock_control=clock_control))
    frame = results(open_store(db, write=False), experiment_id, kind)
    columns = BATCH_COLUMNS if kind == "batch" else None if kind == "fusion" else [
        c for c in SPEEDUP_COLUMNS + ("algorithm_a", "algorithm_b", "workspace_bytes_b", "library_algorithm",
                                      "library_ms", "l1_hit_rate_change", "l2_hit_rate_change")
        if c in frame.columns and (kind in ("library", "algorithms", "variants") or not c.startswith(("algorithm",
                                                                                                      "library")))]
    if fmt == "table":
        click.echo(f"experiment e{experiment_id} complete; speedup = baseline time / arm time; "
                   f"next: tracker report e{experiment_id} --out report/")
    emit(_records(frame), fmt, columns)


@cli.command()
@db_option
@format_option
def experiments(db, fmt):
    """List the experiments in the trace database and the runs of each.

    \b
    Examples:
      tracker experiments
      tracker experiments --format json
    """
    from tracker.analysis.experiments import runs
    from tracker.store import experiment_dict, experiment_ids, find_experiment, open_store

    store = open_store(db, write=False)
    rows = []
    for experiment_id in experiment_ids(store):
        info = experiment_dict(find_experiment(store, experiment_id))
        arms = runs(store, experiment_id)
        rows.append({"experiment": f"e{experiment_id}", "kind": info["kind"], "status": info["status"],
                     "network": info["network"], "backend": info["settings"].get("backend"),
                     "runs": ",".join(str(r) for r in arms.run_id), "arms": ", ".join(arms.arm),
                     "started_at": info["started_at"].isoformat(timespec="seconds")})
    if not rows and fmt == "table":
        click.echo("no experiments yet: tracker experiment fusion alexnet --batch 128")
        return
    emit(rows, fmt)


@cli.command()
@click.argument("run_a")
@click.argument("run_b")
@db_option
@format_option
def compare(run_a, run_b, db, fmt):
    """Per-layer speedup of RUN_B over RUN_A, and how the counters changed.

    Speedup = RUN_A's time / RUN_B's time (above 1: RUN_B is faster). Refuses runs whose layers or
    phases differ, a measured run against a model run, or a run against itself. Two GPUs: profile
    the same network on each (or into one database) and compare; two batch sizes: the same, and the
    times are then per image (each divided by its run's batch), as the header line says.

    \b
    Examples:
      tracker compare 3 4
      tracker compare 3 4 --format csv > speedup.csv
    """
    from tracker.analysis.speedup import basis, comparison
    from tracker.store import find_run, open_store

    store = open_store(db, write=False)
    a, b = find_run(store, run_a).id, find_run(store, run_b).id
    rows = _records(comparison(store, a, b))
    if fmt == "table":
        per = basis(store, a, b)
        by = {run: find_run(store, run).implementation for run in (a, b)}
        who = f" ({by[b]} against {by[a]})" if by[a] != by[b] else ""
        click.echo(f"run {b} against run {a}{who}: speedup = run {a} time / run {b} time, {per}"
                   f"{' (the batch sizes differ)' if per == 'per image' else ''}; "
                   "noise: the runs' ranges over their iterations overlap")
        emit(rows, fmt, [c for c in SPEEDUP_COLUMNS[2:] + ("algorithm_a", "algorithm_b", "first_reason_a",
                                                           "first_reason_b", "l1_hit_rate_change",
                                                           "l2_hit_rate_change", "fp32_inst_change")
                         if any(r.get(c) is not None for r in rows)])
        return
    emit(rows, fmt)


@cli.command()
@click.argument("target", default="last", metavar="RUN|EXPERIMENT")
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Directory for the figures and pages.")
@click.option("--against", default=None, metavar="RUN",
              help="Also draw TARGET's speedup over this run (paper 003 Figure 8: two GPUs, two batch sizes).")
@db_option
def report(target, out, against, db):
    """Paper 003's figures and tables for a run or an experiment, with a finding per figure.

    RUN is a run id or 'last'; EXPERIMENT is an experiment id written e2 (see `tracker
    experiments`). Writes each figure as PNG and SVG, index.html and report.md into --out.
    Figures the run has no data for (no counters without ncu) are listed with the reason.

    \b
    Examples:
      tracker report 3 --out report/
      tracker report e2 --out fusion-report/
      tracker report 4 --against 3 --out h100-vs-a100/
    """
    from pathlib import Path

    from tracker.paths import check_dir
    from tracker.report import report as write_report
    from tracker.store import open_store

    check_dir(out)  # before the database: an unwritable --out opens nothing
    store = open_store(db, write=False)
    written, built = write_report(store, target, out, against)
    drawn = sum(s.figure is not None for s in built.sections)
    click.echo(f"{drawn} figures of {len(built.sections)} sections in {out}; open {Path(out) / 'index.html'}")
    for s in built.sections:
        if not s.folded:
            click.echo(f"  {s.title}: {s.finding}" + (f" [not drawn: {s.missing}]" if s.missing else ""))
    folded = [s.title for s in built.sections if s.folded]
    if folded:
        click.echo(f"  not collected (no counters): {', '.join(folded)}; fill them with `{built.fill_command}` on a GPU")


@cli.command()
@click.argument("run", default="last")
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Directory for the files.")
@click.option("--format", "fmt", type=click.Choice(EXPORT_FORMATS), default="csv", show_default=True)
@db_option
def export(run, out, fmt, db):
    """Every view of one run (and its launch, metric and layer tables) as CSV or Parquet files.

    \b
    Examples:
      tracker export 3 --out run3/
      tracker export last --format parquet --out run3/
    """
    from tracker.export import export as write_export
    from tracker.paths import check_dir
    from tracker.store import find_run, open_store

    check_dir(out)  # before the database: an unwritable --out opens nothing
    store = open_store(db, write=False)
    written = write_export(store, find_run(store, run).id, out, fmt)
    click.echo(f"{len(written)} files in {out}")
