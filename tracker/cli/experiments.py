"""Commands that run and follow experiments: experiment, experiments, and arm (what each cluster
job runs). The work lives in tracker/experiment.py; these parse, call and print."""

from __future__ import annotations

import sys

import click

from tracker.cli.catalog import device_option
from tracker.cli.options import (
    FiniteRange,
    WholeNumber,
    command_started,
    db_option,
    emit,
    format_option,
    ncu_options,
    net_kwargs,
    network_options,
    output_dir,
)
from tracker.cli.output import records
from tracker.cli.study import SPEEDUP_COLUMNS
from tracker.errors import TrackerError, comma_list, parse_whole_number, shorten
from tracker.executors import EXECUTORS
from tracker.experiment import KINDS
from tracker.model.roofline import MAX_BATCH
from tracker.profile import BACKENDS, MAX_REPEAT, MAX_WARMUP

BATCH_COLUMNS = ("batch", "layer", "phase", "ms", "spread_pct", "ms_per_image", "ops", "bytes", "source")
TOTAL_COLUMNS = ("batch", "step_ms", "ms_per_image", "images_per_s", "ops", "bytes")  # a batch's whole training step
ACROSS = {
    "gpu": "GPU against GPU (paper 003 Fig. 8): speedup = the first GPU's time / this GPU's time",
    "batch": "batch against batch, per image: speedup = the first batch's time per image / this one's",
}


def _items(param, value: str, example: str) -> list[str]:
    """A comma-list option's items through the one splitter; an empty list or item is a usage error."""
    try:
        return comma_list(value, f"--{param.name}", example)
    except TrackerError as exc:
        raise click.UsageError(str(exc)) from None


def _batches(ctx, param, value: str | None) -> tuple[int, ...]:
    if value is None:
        return ()
    _items(param, value, "16,64,128")  # refuses an empty list or item
    try:  # the items unstripped: ' 8' is no number
        sizes = tuple(parse_whole_number(item, "a batch size", 1, MAX_BATCH) for item in value.split(","))
    except TrackerError as exc:
        raise click.BadParameter(f"{exc} (e.g. 16,64,128)") from None
    if len(set(sizes)) != len(sizes):
        raise click.BadParameter(f"batch sizes must be distinct, from 1 to {MAX_BATCH}")
    return sizes


def _names(ctx, param, value: str | None) -> tuple[str, ...]:
    """A comma-separated list of names (variants, GPU kinds): letters, digits, '.', '_' and '-'."""
    import re

    if value is None:
        return ()
    names = tuple(_items(param, value, "global,shared" if param.name == "variants" else "h100,a100"))
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", n)]
    if bad:
        raise click.BadParameter(f"'{bad[0]}' is not a name (letters, digits, '.', '_', '-'; e.g. h100,a100)")
    if len(set(names)) != len(names):
        raise click.BadParameter("a name is given twice")
    return names


def _axes(ctx, param, values: tuple[str, ...]) -> tuple[tuple[str, tuple], ...]:
    """--vary NAME=V,V,...: each a network option and its values (``nets.axis``), a usage error if not."""
    from tracker.nets import axis

    try:
        return tuple(axis(value) for value in values)
    except TrackerError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.argument("kind", type=click.Choice(KINDS))
@click.argument("network")
@click.option(
    "--batch", "-b", type=WholeNumber(1, MAX_BATCH), default=128, show_default=True, help="Images per mini-batch."
)
@click.option(
    "--batches",
    callback=_batches,
    default=None,
    metavar="B,B,...",
    help="batch: the batch sizes to run (e.g. 16,64,128; the first is the baseline).",
)
@db_option
@click.option(
    "--backend",
    type=click.Choice(BACKENDS),
    default="auto",
    show_default=True,
    help="As for tracker profile; only batch runs on the model backend.",
)
@click.option(
    "--repeat",
    type=WholeNumber(1, MAX_REPEAT),
    default=5,
    show_default=True,
    help="Measured iterations per run: the spread that tells a speedup from noise.",
)
@click.option("--warmup", type=WholeNumber(0, MAX_WARMUP), default=1, show_default=True)
@click.option(
    "--variants",
    "variants",
    callback=_names,
    default=None,
    metavar="V,V,...",
    help="l1-bypass, variants, batch: the kernel variants to run (default: every one; the first is "
    "the variants baseline; batch runs each at every batch size).",
)
@click.option(
    "--vary",
    "vary",
    multiple=True,
    callback=_axes,
    metavar="OPTION=V,V,...",
    help="Run every arm at each value of a network option (repeatable: every combination), e.g. "
    "--vary input_size=64,96,128 --vary conv_type=standard,separable.",
)
@click.option(
    "--gpus",
    callback=_names,
    default=None,
    metavar="KIND,...",
    help="Run every arm on each GPU kind and compare GPU against GPU per layer (paper 003 Fig. 8): "
    "Slurm GRES types (gpu:KIND) with --executor slurm; catalog devices on --backend model.",
)
@click.option(
    "--executor",
    type=click.Choice(EXECUTORS),
    default="local",
    show_default=True,
    help="local: this process runs the arms one after another. slurm: one job per arm on the "
    "cluster (sbatch --array), into one PostgreSQL store (--db postgresql://...).",
)
@click.option(
    "--sbatch",
    "sbatch_args",
    default="",
    metavar="OPTIONS",
    help="slurm: more sbatch options, e.g. '--partition=gpu --time=30 --account=lab' "
    "({gpu} becomes the arm's GPU kind: '--partition={gpu}').",
)
@click.option(
    "--logs",
    default="tracker-logs",
    show_default=True,
    callback=output_dir,
    help="slurm: the directory each job writes its output to (one the nodes share).",
)
@click.option(
    "--detach",
    is_flag=True,
    help="slurm: submit the arms and return; `tracker experiments eN` follows them, and running "
    "the same command again waits for them.",
)
@click.option(
    "--poll",
    type=FiniteRange(0.1, 3600),
    default=5.0,
    show_default=True,
    metavar="SECONDS",
    help="slurm: how often to look at the store and the queue while the arms run.",
)
@click.option(
    "--layers",
    "layer_rows",
    is_flag=True,
    help="batch: after each batch size's totals, every layer phase's time (the report draws them too).",
)
@click.option(
    "--fresh",
    is_flag=True,
    help="Start a new experiment even where an unfinished one was planned the same way "
    "(by default it is resumed: complete arms are kept, the rest run again).",
)
@ncu_options
@device_option
@network_options
@format_option
def experiment(
    kind,
    network,
    batch,
    batches,
    variants,
    vary,
    gpus,
    executor,
    sbatch_args,
    logs,
    detach,
    poll,
    layer_rows,
    fresh,
    db,
    backend,
    repeat,
    warmup,
    clock_control,
    cache_control,
    device,
    fmt,
    **kwargs,
):
    """Run a set of profiles that answers one question, and print per-layer speedups.

    \b
    KIND:
      l1-bypass  every kernel variant with and without the L1-bypass build, per variant
      fusion     conv/fc + separate ReLU against the fused kernels, per fused pair
      variants   global, constant, shared, gemm and fused kernels against global
      batch      runtime per layer at each of --batches
      library    our kernels (tuned) against PyTorch's cuDNN and cuBLAS (--impl torch),
                 with the algorithm cuDNN ran per layer phase
      algorithms direct, implicit GEMM, explicit GEMM and Winograd convolutions against the
                 default, per conv layer phase, with the algorithm that ran, its workspace
                 (the model's) and a library run's choice where one is stored (paper 004)
      memory     the model's peak memory of a training step beside the measured one, ours and
                 PyTorch's, per arm; an arm that runs out of memory is recorded and the rest
                 run (paper 002: --vary input_size=... --batches ...; the model backend too)
    A speedup is 'noise' when the two runs' ranges over their --repeat iterations overlap.

    \b
    A sweep adds axes: every arm at each of --batches (for any kind but batch, whose axis it
    is), at each value of each --vary network option, and on each of --gpus; each cell compares its arms,
    and GPU is compared with GPU per
    layer. Each arm's state, node and GPU: `tracker experiments eN`. Running an unfinished
    experiment again resumes it: complete arms are kept, the others run again. While a process
    here runs it, the same command stops in one line (exit 1): each arm runs once.

    \b
    Examples:
      tracker experiment l1-bypass alexnet --batch 128
      tracker experiment fusion alexnet --batch 128 --repeat 10
      tracker experiment batch alexnet --batches 16,64,128
      tracker experiment batch alexnet --batches 16,128 --backend model --device a100
      tracker experiment library alexnet --batch 128 --backend events
      tracker experiment algorithms alexnet --batch 128
      tracker experiment variants alexnet --variants global,shared --gpus h100,a100 \\
          --executor slurm --db postgresql://tracker@dbhost/traces --sbatch '--time=30'
      tracker experiment batch alexnet --batches 16,64,128 --gpus h100,a100 --backend model
    """
    from tracker.experiment import run_experiment
    from tracker.model import lookup
    from tracker.model.devices import MODEL_DEFAULT
    from tracker.nets import build
    from tracker.profilers.ncu import Settings as NcuSettings

    net = build(network, **net_kwargs(kwargs))
    gpu = lookup(device) if device else None
    if kind == "batch" and not batches:
        batches = (batch,)
    say = (lambda line: click.echo(line, err=True)) if fmt != "table" else click.echo
    runner = _executor(executor, sbatch_args, logs, poll, detach)
    if layer_rows and kind != "batch":
        raise click.UsageError(
            f"--layers prints a batch experiment's layer rows after its totals; experiment {kind} prints its rows whole"
        )
    experiment_id = run_experiment(
        db,
        kind,
        net,
        batch,
        batches=batches,
        variants=variants,
        gpus=gpus,
        vary=vary,
        backend=backend,
        repeat=repeat,
        warmup=warmup,
        device=gpu,
        echo=say,
        ncu=NcuSettings(cache_control=cache_control, clock_control=clock_control),
        executor=runner,
        fresh=fresh,
        model_device=lookup(MODEL_DEFAULT),
        started=command_started(),
    )  # twins started together share one experiment
    if not detach:
        _print_outcome(db, experiment_id, kind, bool(variants), bool(gpus), fmt, layer_rows, say)


def _print_outcome(db, experiment_id: int, kind: str, variants: bool, gpus: bool, fmt: str, layer_rows: bool, say):
    """The experiment's tables or rows; exit 1 where it did not complete, saying how to resume."""
    from tracker.experiment import outcome
    from tracker.store import open_store

    store = open_store(db, write=False)
    result = outcome(store, experiment_id, kind)
    if not result.complete:
        say(f"experiment e{experiment_id} {result.status}: {result.error}; run the same command again to resume it")
    swept = [c for c in ("arm", "gpu") if kind == "batch" and (variants if c == "arm" else gpus)]
    columns = _columns(kind, result.frame, swept)
    if fmt == "table":
        _print_tables(store, experiment_id, kind, result, swept, columns, layer_rows)
    else:
        _print_rows(result, fmt, columns)
    if not result.complete:
        sys.exit(1)


def _executor(executor: str, sbatch_args: str, logs: str, poll: float, detach: bool):
    """The executor the options name; --detach only with one that leaves jobs running."""
    from tracker.executors import Local, Slurm

    runner = Slurm(tuple(_split(sbatch_args)), logs, poll, detach) if executor == "slurm" else Local()
    if detach and executor == "local":
        raise click.UsageError("--detach leaves a cluster's jobs running: it needs --executor slurm")
    return runner


def _columns(kind: str, frame, swept: list[str]):
    """The columns a table of ``kind``'s rows shows (None: all of them, as they come)."""
    from tracker.analysis.experiments import CUDNN_COLUMNS

    if kind == "batch":
        return (*swept, *BATCH_COLUMNS)
    if kind in ("fusion", "memory"):
        return None
    return [
        c
        for c in SPEEDUP_COLUMNS
        + (
            "algorithm_a",
            "algorithm_b",
            "workspace_bytes_b",
            *CUDNN_COLUMNS,
            "l1_hit_rate_change",
            "l2_hit_rate_change",
        )
        if c in frame.columns
        and (kind in ("library", "algorithms", "variants") or not c.startswith(("algorithm", "library")))
    ]


def _print_tables(store, experiment_id: int, kind: str, result, swept: list[str], columns, layer_rows: bool) -> None:
    """The experiment for a reader: what it measured, its arms' rows, and each sweep's comparison."""
    measure = (
        "each arm's peak memory of a training step, the model's beside the measured"
        if kind == "memory"
        else "the training step at each batch, in all and per image"
        if kind == "batch"
        else "speedup = baseline time / arm time"
    )
    click.echo(f"experiment e{experiment_id} {result.status}; {measure}; next: tracker report e{experiment_id}")
    if kind == "batch":
        _batch_tables(result.frame, swept, columns, layer_rows)
    else:
        emit(records(result.frame), "table", columns)
    if kind == "memory" and not result.frame.empty:
        from tracker.analysis.experiments import memory_finding

        click.echo(f"\nfinding: {memory_finding(store, experiment_id)}")
    for axis, table in result.sweeps:
        click.echo(f"\n{ACROSS[axis]}")
        emit(records(table), "table", [c for c in SPEEDUP_COLUMNS if c in table.columns])


def _print_rows(result, fmt: str, columns) -> None:
    """The experiment for programs: with sweeps, one table whose rows say which comparison they belong to."""
    if result.sweeps:
        emit(
            records(result.frame.assign(table="arms"))
            + [r for axis, table in result.sweeps for r in records(table.assign(table=axis))],
            fmt,
        )
    else:
        emit(records(result.frame), fmt, columns)


def _batch_tables(frame, swept: list[str], columns, layer_rows: bool) -> None:
    """A batch experiment as a table: the training step's totals per batch size (per ``swept``
    arm and GPU) first, then each layer phase's row with --layers (else a line saying how to see them)."""
    from tracker.analysis.experiments import batch_totals

    emit(records(batch_totals(frame, tuple(swept))), "table", [*swept, *TOTAL_COLUMNS])
    if layer_rows:
        click.echo("\nper layer phase")
        emit(records(frame), "table", columns)
    elif not frame.empty:
        click.echo(f"\n{len(frame)} layer phase rows: --layers prints them")


def _split(options: str) -> list[str]:
    import shlex

    try:
        return shlex.split(options)
    except ValueError as exc:
        raise click.BadParameter(f"--sbatch: {exc}") from None


@click.command()
@click.argument("target", default=None, required=False, metavar="[EXPERIMENT]")
@db_option
@format_option
def experiments(target, db, fmt):
    """List the experiments in the trace database, or one experiment's arms.

    Without EXPERIMENT: each experiment, its status, executor and how many arms are in each state.
    With EXPERIMENT (e.g. e2, or 'last'): each arm's state (queued, running, complete, failed,
    interrupted), the node and GPU it ran on, its run, job, attempts, and why it did not complete.

    \b
    Examples:
      tracker experiments
      tracker experiments e2
      tracker experiments --format json
    """
    from tracker.store import experiment_dict, experiment_ids, find_experiment, open_store
    from tracker.store.queries import arm_rows, experiment_arm_runs
    from tracker.store.states import arm_state

    store = open_store(db, write=False)
    if target is not None:
        experiment_id = find_experiment(store, target).id
        arms = arm_rows(store, experiment_id)
        if not arms:  # recorded before schema v8, which planned no arms: its runs, as they were linked
            if fmt == "table":
                click.echo(f"e{experiment_id} was recorded before arms were planned (schema v8): its runs")
            emit([{"arm": arm, "run": run} for arm, run in experiment_arm_runs(store, experiment_id)], fmt)
            return
        emit([_arm_row(arm, arm_state(arm)) for arm in arms], fmt)
        return
    rows = []
    for experiment_id in experiment_ids(store):
        arms = arm_rows(store, experiment_id)
        info = experiment_dict(find_experiment(store, experiment_id), arms)
        linked = experiment_arm_runs(store, experiment_id)
        states = [arm_state(a) for a in arms]
        rows.append(
            {
                "experiment": f"e{experiment_id}",
                "kind": info["kind"],
                "status": info["status"],
                "network": info["network"],
                "backend": info["settings"].get("backend"),
                "executor": info["settings"].get("executor", "local"),
                "arms": ", ".join(f"{states.count(s)} {s}" for s in dict.fromkeys(states))
                or ", ".join(arm for arm, _ in linked),
                "runs": ",".join(str(run) for _, run in linked),
                "started_at": info["started_at"].isoformat(timespec="seconds"),
            }
        )
    if not rows and fmt == "table":
        click.echo("no experiments yet: tracker experiment fusion alexnet --batch 128")
        return
    emit(rows, fmt)


def _arm_row(arm, state: str) -> dict:
    return {
        "position": arm.position,
        "arm": arm.label,
        "gpu": arm.gpu,
        "state": state,
        "node": arm.node,
        "device": arm.device_name,
        "run": arm.run_id,
        "job": arm.job,
        "attempts": arm.attempts,
        "reason": arm.reason,
        "log": arm.log_path,
    }


@click.command()
@click.argument("experiment_ref", metavar="EXPERIMENT")
@click.argument("position", type=WholeNumber(0))
@db_option
def arm(experiment_ref, position, db):
    """Run one queued arm of an experiment: what each cluster job runs (tracker experiment --executor
    slurm), on the node it lands on, into the store in $TRACKER_DB or --db.

    \b
    Example (as a Slurm array task runs it):
      tracker arm e3 "$SLURM_ARRAY_TASK_ID"
    """
    from tracker.experiment import run_arm
    from tracker.store import find_experiment, open_store
    from tracker.store.queries import arm_rows

    store = open_store(db, write=False)  # read first: a database that does not exist is refused, not created
    experiment_id = find_experiment(store, experiment_ref).id
    count = len(arm_rows(store, experiment_id))
    store.dispose()
    if position >= count:  # before the store sees it: 2**64 overflows SQLite's integers
        raise click.BadParameter(
            f"e{experiment_id} has no arm {shorten(str(position))}"
            + (f" (its arms are 0 to {count - 1})" if count else ""),
            param_hint="'POSITION'",
        )
    result = run_arm(db, experiment_id, position, echo=click.echo)
    click.echo(f"arm {position} of e{experiment_id} complete: run {result.run_id}")
