"""Commands that read or write the trace database: profile, runs, show, sql."""

from __future__ import annotations

import click

from tracker.cli.catalog import MODEL_COLUMNS, ROOF_COLUMNS, device_option, dtype_option, phases_option
from tracker.cli.options import (
    WholeNumber,
    db_option,
    emit,
    format_option,
    ncu_options,
    net_kwargs,
    network_options,
    output_file,
)
from tracker.cli.output import cell, held, stream, to_json
from tracker.errors import TrackerError
from tracker.extras import install
from tracker.gpu.workload import Workload
from tracker.implementations import PROFILED
from tracker.model import lookup
from tracker.model.devices import MODEL_DEFAULT
from tracker.model.roofline import MAX_BATCH
from tracker.nets import build
from tracker.profile import BACKENDS, MAX_REPEAT, MAX_WARMUP, profile_workload
from tracker.profilers import COLLECTORS


@click.command()
@click.argument("network", required=False)
@click.option(
    "--batch",
    "-b",
    type=WholeNumber(1, MAX_BATCH),
    default=128,
    show_default=True,
    help="Images per mini-batch (paper 003 used 16, 64 and 128).",
)
@click.option(
    "--torch",
    "torch_model",
    default=None,
    metavar="MODULE:FUNCTION",
    help="Profile your own PyTorch model instead of NETWORK: FUNCTION (no arguments) returns an nn.Module "
    "and an example input, whose first dimension is the batch (--batch resizes it, repeating the "
    "example's samples). Every call of a leaf module is a layer, named by its module path (path#k for "
    "the k-th of several calls), forward and backward, with the FLOPs torch.utils.flop_counter counts "
    "(batch norm, ReLU and max-pool ops as our networks count them) beside the measurement. Implies "
    "--impl torch.",
)
@db_option
@click.option(
    "--backend",
    type=click.Choice(BACKENDS),
    default="auto",
    show_default=True,
    help="auto: ncu with a GPU and Nsight Compute (nvprof on a GPU before Volta, which ncu does not "
    "support), events with a GPU only, model without a GPU. cupti: CUPTI's range profiler in this "
    "process, each layer phase replayed per counter pass (its GPU tests pass on an H200; its speed against ncu "
    "is not yet measured).",
)
@phases_option
@click.option(
    "--variant",
    default=None,
    metavar="V|OP=V,...",
    help="Kernel variant: one name for every op that has it (shared), or per op (conv=fused,lrn=shared).",
)
@click.option(
    "--l1-bypass",
    is_flag=True,
    help="Compile the kernels to bypass L1: -Xptxas -dlcm=cg and no read-only path, so "
    "every global load goes around L1 (tracker kernels shows the load mix).",
)
@click.option(
    "--staged",
    is_flag=True,
    help="Run the L1-bypass build's code with L1 cached: the GEMM operands staged through registers, "
    "no cp.async (a 4-byte cp.async always fills L1). Against --l1-bypass it isolates what L1 does; "
    "`tracker experiment l1-bypass` runs both.",
)
@click.option(
    "--repeat",
    type=WholeNumber(1, MAX_REPEAT),
    default=5,
    show_default=True,
    help="Measured iterations (GPU backends); every launch is timed in each.",
)
@click.option(
    "--counter-iterations",
    type=WholeNumber(1, MAX_REPEAT),
    default=1,
    show_default=True,
    metavar="N",
    help="ncu and nvprof: collect counters from the first N measured iterations (at most --repeat). Pass "
    "2 replays every launch once per counter pass (18 on an H100), so each iteration costs minutes; the "
    "other iterations keep their times and carry no counters.",
)
@click.option(
    "--warmup",
    type=WholeNumber(0, MAX_WARMUP),
    default=1,
    show_default=True,
    help="Unmeasured iterations first (the first one compiles the kernels).",
)
@click.option(
    "--impl",
    "implementation",
    type=click.Choice(PROFILED),
    default="ours",
    show_default=True,
    help="Who runs the network: ours (tracker's kernels) or torch (the same network built in PyTorch from "
    "tracker's definition, run by cuDNN and cuBLAS layer phase by layer phase under the same ranges; "
    f"{install('torch')}). The run records torch, cuDNN and cuBLAS versions and, per layer phase, the "
    "algorithm the library's kernels ran.",
)
@click.option(
    "--tf32",
    is_flag=True,
    help="--impl torch: let cuDNN and cuBLAS use TF32 tensor cores (off: fp32, as our kernels compute).",
)
@click.option(
    "--cudnn-benchmark",
    is_flag=True,
    help="--impl torch: let cuDNN time its algorithms during warm-up "
    "and keep the fastest (off: its heuristics choose).",
)
@click.option(
    "--untuned",
    is_flag=True,
    help="Run each op's default variant with the default tiles: not the conv rule's algorithm "
    "(Winograd F(4x4) where it applies) nor what `tracker tune` stored for this GPU.",
)
@click.option(
    "--ncu-report",
    default=None,
    metavar="FILE",
    callback=output_file,
    help="Keep pass 2's report here: Nsight Compute's .ncu-rep, to open in ncu-ui (backend ncu), or "
    "nvprof's CSV log (backend nvprof).",
)
@ncu_options
@device_option
@dtype_option
@network_options
@format_option
def profile(
    network,
    batch,
    torch_model,
    db,
    backend,
    phases,
    variant,
    l1_bypass,
    staged,
    repeat,
    counter_iterations,
    warmup,
    implementation,
    tf32,
    cudnn_benchmark,
    untuned,
    ncu_report,
    clock_control,
    cache_control,
    device,
    dtype_bits,
    fmt,
    **kwargs,
):
    """Profile a network forward and backward, layer by layer, into the trace database.

    NETWORK is one of tracker's (`tracker networks`), run by our kernels or, with --impl torch,
    by PyTorch's cuDNN and cuBLAS; or give --torch MODULE:FUNCTION for your own PyTorch model.

    Chooses the backend (ncu, nvprof, events or model) from what this machine has and says which
    and why. Without a GPU the run holds the analytic model's predictions, labelled as such.

    \b
    Examples:
      tracker profile alexnet --batch 128
      tracker profile alexnet --batch 64 --device h100 --db runs.db
      tracker profile alexnet --batch 16 --backend ncu --repeat 3 --ncu-report alexnet.ncu-rep
      tracker profile alexnet --batch 128 --counter-iterations 3
      tracker profile unet2d --batch 16 --conv-type separable --backend model
      tracker profile alexnet --batch 128 --impl torch --backend events
      tracker profile --torch mymodels.resnet:build --backend events
      tracker profile --torch mymodels.resnet:build --batch 64 --backend model
    """
    from tracker.ops import OPS
    from tracker.profilers import Options
    from tracker.profilers.ncu import Settings as NcuSettings

    if torch_model:  # every input is checked before the database is opened
        net, batch, implementation = _torch_model(torch_model, network, implementation, batch, net_kwargs(kwargs))
    else:
        net = _network(network, net_kwargs(kwargs))
    variants = OPS.parse_variants(variant)
    workload = Workload.of(
        net,
        batch,
        variants=variants,
        phases=phases,
        l1_bypass=l1_bypass,
        staged=staged,
        repeat=repeat,
        warmup=warmup,
        implementation=implementation,
        tf32=tf32,
        cudnn_benchmark=cudnn_benchmark,
    )  # the one value that reaches pass 2's child process
    options = Options(
        NcuSettings(cache_control=cache_control, clock_control=clock_control), ncu_report, counter_iterations
    )
    result = profile_workload(
        db,
        workload,
        backend=backend,
        device=lookup(device) if device else None,
        dtype_bits=int(dtype_bits),
        options=options,
        echo=(lambda line: click.echo(line, err=True)) if fmt != "table" else click.echo,
        untuned=untuned,
        model_device=lookup(MODEL_DEFAULT),
    )
    if fmt != "table":
        emit([result.summary()], fmt)
        return
    _say_stored(result, bool(variant or l1_bypass or staged))


def _network(network: str | None, options: dict):
    """Tracker's NETWORK with its options."""
    if network is None:
        raise TrackerError(
            "name a NETWORK (tracker networks lists them) or your own model with --torch MODULE:FUNCTION"
        )
    return build(network, **options)


def _say_stored(result, ours_chosen: bool) -> None:
    """What was stored, in words, with the options the backend ran without."""
    from tracker.implementations import implementation

    workload = result.workload
    click.echo(
        f"run {result.run_id} complete: {workload.net.name}{implementation(workload.implementation).by}, "
        f"batch {workload.batch}, {cell('', result.ops)} ops, {cell('bytes', result.bytes)} compulsory traffic, "
        f"peak memory {cell('bytes', result.memory.peak_bytes)}"
    )
    if result.backend == "model":
        click.echo(
            "  these are analytic predictions: nothing was measured"
            + (f", times for the {result.device.name}" if result.device else "")
        )
    if result.backend == "model" and ours_chosen:
        click.echo(
            "  --variant, --l1-bypass and --staged are recorded on the run; "
            "the model's compulsory bytes do not depend on them"
        )
    for option in ("ncu_report", "counter_iterations"):
        if _given(option) and result.backend not in COLLECTORS:
            click.echo(f"  --{option.replace('_', '-')} ignored: the {result.backend} backend runs no counter profiler")
    click.echo(f"  stored in {result.db}; next: tracker show {result.run_id}, tracker report {result.run_id}")


def _given(parameter: str) -> bool:
    """Whether the command line set ``parameter`` (rather than its default)."""
    return click.get_current_context().get_parameter_source(parameter) != click.core.ParameterSource.DEFAULT


def _torch_model(spec: str, network: str | None, implementation: str, batch: int, options: dict):
    """(network, batch, implementation) of --torch MODULE:FUNCTION at --batch where given (else its
    example's), refusing what does not apply."""
    if network is not None:
        raise TrackerError(f"give NETWORK ({network}) or --torch {spec}, not both")
    given = [name for name, value in options.items() if value is not None]
    if given:
        raise TrackerError(f"--{given[0].replace('_', '-')} is an option of tracker's networks, not of --torch {spec}")
    from tracker.library import require_torch

    require_torch("--torch")
    from tracker.library.torch_module import check_spec
    from tracker.library.torch_module import network as torch_network

    net = torch_network(check_spec(spec), batch if _given("batch") else None)
    return net, int(net.options["example_batch"]), implementation if _given("implementation") else "torch"


@click.command()
@db_option
@format_option
def runs(db, fmt):
    """List the runs in the trace database, oldest first.

    A run whose process died without marking it shows as 'interrupted'.

    \b
    Examples:
      tracker runs
      tracker runs --db runs.db --format json
    """
    from tracker.store import list_runs, open_store

    rows = list_runs(open_store(db, write=False))
    if not rows and fmt == "table":
        click.echo("no runs yet: tracker profile alexnet --batch 128")
        return
    emit(rows, fmt)


SHOW_COLUMNS = (
    MODEL_COLUMNS + ROOF_COLUMNS + ("launches", "median_ms", "spread_pct", "idle_ms", "achieved_gflops", "algorithm")
)


@click.command()
@click.argument("run", default="last")
@db_option
@format_option
def show(run, db, fmt):
    """Show one run: its settings, then per layer and phase the prediction beside any measurement.

    RUN is a run id from `tracker runs`, or 'last' (the default).

    \b
    Examples:
      tracker show 3
      tracker show last --format json
    """
    from tracker.store import find_run, launch_rows, layer_rows, metric_rows, open_store, run_dict
    from tracker.store.queries import idle_per_iteration

    store = open_store(db, write=False)
    info = run_dict(find_run(store, run))
    rows = layer_rows(store, info["id"])
    if fmt == "json":
        launches, metrics = launch_rows(store, info["id"]), metric_rows(store, info["id"])
        gaps = idle_per_iteration(store, info["id"])
        click.echo(to_json({"run": info, "gpu_idle": gaps, "layers": rows, "launches": launches, "metrics": metrics}))
        return
    if fmt == "csv":
        emit(rows, fmt)
        return
    _show_settings(store, info)
    click.echo()
    emit(rows, fmt, [c for c in SHOW_COLUMNS if any(row.get(c) is not None for row in rows)])


SHOW_SETTINGS = (  # what `tracker show` lists of a run, in this order, where it has a value
    "id",
    "status",
    "network",
    "network_options",
    "implementation",
    "library",
    "batch",
    "phases",
    "dtype_bits",
    "backend",
    "backend_reason",
    "device_name",
    "variants",
    "tuned_variants",
    "tiles",
    "l1_bypass",
    "repeat",
    "counter_iterations",
    "peak_memory",
    "gpu_idle",
    "started_at",
    "finished_at",
    "error",
    "command_line",
    "provenance",
)


def _show_settings(store, info: dict) -> None:
    """A run's settings, one a line, and what an unfinished or model run holds."""
    from tracker.model.memory import PeakMemory
    from tracker.profilers import unfinished
    from tracker.store import launch_count
    from tracker.store.queries import idle_line

    info["peak_memory"] = PeakMemory.of(info["predicted_peak_bytes"], info["measured_peak_bytes"]).line()
    info["gpu_idle"] = idle_line(store, info["id"])
    for key in SHOW_SETTINGS:
        if info[key] not in (None, {}, "") and not (key == "repeat" and info[key] == 0):  # 0: a model run's
            click.echo(f"{key:>20}: {cell(key, info[key])}")
    note = unfinished(info, launch_count(store, info["id"]))
    if note:
        click.echo(f"\n{note}")
    if info["backend"] == "model":
        click.echo("\nanalytic predictions (backend model): nothing in this run was measured")


TABLE_ROWS = 1000  # a table aligns its columns, so it holds its rows: this many unless --limit says


def _bounded(check: str):
    """A click callback holding a value to the library's own check (tracker.store.sql ``check``),
    imported when the command runs: the store needs SQLAlchemy, which ``tracker --help`` does not."""

    def callback(ctx, param, value):
        from tracker.store import sql as user_sql

        try:
            return None if value is None else getattr(user_sql, check)(value)
        except TrackerError as exc:
            raise click.BadParameter(str(exc)) from None

    return callback


@click.command()
@click.argument("statement")
@db_option
@click.option(
    "--limit",
    type=WholeNumber(),
    default=None,
    metavar="N",
    callback=_bounded("row_limit"),
    help=f"At most N rows. Default: every row for csv and json, which stream as they are fetched; "
    f"{TABLE_ROWS:,} for the table, which holds its rows to align them.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=None,
    metavar="SECONDS",
    callback=_bounded("time_limit"),
    help="End the query after this long (default 60; tracker.store.sql.DEFAULT_TIMEOUT_S). On PostgreSQL "
    "the server ends it, and Ctrl-C or a killed tracker cancels it there too.",
)
@click.option(
    "--reader-url",
    metavar="URL",
    default=None,
    help="PostgreSQL: the store as a role that can only read, which runs the statement (default: "
    "$TRACKER_READER_URL). Needed when --db's role is a superuser, writes the store, or reaches "
    "files, programs or other connections; `tracker reader-role` makes one.",
)
@format_option
def sql(statement, db, limit, timeout_s, reader_url, fmt):
    """Run one read-only SQL query on the trace database and print its rows.

    Tables: run, layer, prediction, launch, metric, metric_def, experiment, experiment_run. Views:
    layer_phase, layer_time, layer_time_repeat, run_summary, the GPU idle views layer_idle and
    iteration_idle (runs whose launches have starts), and the counter views launch_metrics,
    layer_metric, layer_metric_repeat, layer_summary, stall_breakdown, cache_hit_rate, memory_traffic, fp_instructions,
    utilization, roofline (schema/*.sql documents every column).

    One SELECT, WITH or VALUES query per call, in a read-only transaction; anything that would
    write, or reach files, programs or other connections, is refused, whatever its spelling. On
    PostgreSQL the statement runs only as a role that can only read: --reader-url (or
    $TRACKER_READER_URL) names one, and `tracker reader-role` prints how to make it.

    \b
    Examples:
      tracker sql "SELECT layer, phase, ops, bound FROM layer_phase WHERE run_id = 1"
      tracker sql "SELECT kind, SUM(ops) FROM layer_phase GROUP BY kind" --format csv
      tracker sql "SELECT * FROM launch_metrics" --format csv --timeout 600 > launches.csv
      tracker sql "SELECT * FROM run_summary" --db postgresql://tracker@dbhost/traces \\
          --reader-url postgresql://tracker_reader@dbhost/traces
    """
    from itertools import chain, islice

    from tracker.store import open_store, query, why_empty

    store = open_store(db, write=False)
    with query(store, statement, timeout_s=timeout_s, reader=reader_url) as answer:  # None: the defaults
        for note in answer.notes:
            click.echo(f"note: {note}", err=True)
        if fmt != "table":
            rows = islice(answer.rows, limit)
            first = list(islice(rows, 1))
            stream(answer.columns, chain(first, rows), fmt, lambda text: click.echo(text, nl=False))
            why = None if first else why_empty(store, statement)  # after the query: its answer is complete
            if why:
                click.echo(f"note: no rows: {why}", err=True)
            return
        shown = TABLE_ROWS if limit is None else limit
        listed = [tuple(map(held, row)) for row in islice(answer.rows, shown + 1)]
        if not listed:
            why = why_empty(store, statement)
            click.echo(f"(no rows: {why})" if why else "(no rows)")
            return
        emit([dict(zip(answer.columns, row)) for row in listed[:shown]], fmt, answer.columns)
        if len(listed) > shown:
            click.echo(f"(the first {shown:,} rows; --limit N shows more, --format csv streams them all)", err=True)


@click.command("reader-role")
@db_option
@click.option(
    "--name",
    default="tracker_reader",
    show_default=True,
    metavar="ROLE",
    help="The role to make: lower-case letters, digits and _.",
)
@click.option(
    "--apply",
    "apply_",
    is_flag=True,
    help="Run the SQL on --db as its role (a superuser: it sets temp_file_limit) instead of printing it.",
)
def reader_role(db, name, apply_):
    """Print (or, with --apply, run) the SQL that makes a PostgreSQL role that can only read the store.

    tracker sql runs a statement only as such a role (--reader-url, $TRACKER_READER_URL), judged
    by its login: never a superuser, the role that writes the store, or a member of
    pg_read_server_files, pg_write_server_files, pg_execute_server_program or pg_signal_backend.
    The role gets LOGIN, USAGE on the store's schema and SELECT on its tables and views (and on
    those the store's owner adds later), nothing else, and settings that bound what it spends on
    the server (statement_timeout, idle_in_transaction_session_timeout, work_mem,
    temp_file_limit: a superuser's to set); give it a password (or a pg_hba.conf entry) to log in.
    Where a superuser owns the store, run it again after `tracker upgrade` adds tables.

    \b
    Examples:
      tracker reader-role --db postgresql://tracker@dbhost/traces | psql -h dbhost -U postgres traces
      tracker reader-role --db postgresql://postgres@dbhost/traces --apply --name alice_reader
      psql -h dbhost -U postgres -c "ALTER ROLE tracker_reader PASSWORD 'secret'"
      export TRACKER_READER_URL=postgresql://tracker_reader:secret@dbhost/traces
      tracker sql "SELECT * FROM run_summary" --db postgresql://tracker@dbhost/traces
    """
    from tracker.store import open_store
    from tracker.store.reader import apply, reader_statements

    store = open_store(db, write=False)
    statements = reader_statements(store, name)
    if apply_:
        apply(store, name, statements)
        click.echo(f"made {name}: tracker sql --reader-url postgresql://{name}@HOST/DATABASE", err=True)
        return
    click.echo("".join(f"{statement};\n" for statement in statements), nl=False)


@click.command()
@db_option
def upgrade(db):
    """Bring a trace database to this tracker's schema, keeping every run.

    Opening a database to write (tracker profile, tracker experiment) upgrades it too; reading
    commands refuse an older schema rather than change the file.

    \b
    Examples:
      tracker upgrade
      tracker upgrade --db runs.db
    """
    from tracker.store import SCHEMA_VERSION, open_store

    store = open_store(db, write=True, create=False)  # a file that is not a store yet is refused, not made one
    store.dispose()
    if store.upgraded_from is None:
        click.echo(f"{store.where}: trace schema v{SCHEMA_VERSION}, already this tracker's")
    else:
        click.echo(f"{store.where}: trace schema v{store.upgraded_from} -> v{SCHEMA_VERSION}, every run kept")


@click.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option(
    "--network",
    default=None,
    metavar="NAME",
    help="The tracker network the profile ran (`tracker networks`): its layers are those its ranges name as "
    "tracker does (conv1/fwd), or the operator calls of a PyTorch trace by kind and order (the third "
    "aten::conv2d is the third conv); what ran in none of them is not stored, and says so. The model's "
    "predictions stand beside the measurement. Default: a network of the file's own ranges, with blank "
    "predictions.",
)
@click.option(
    "--layers",
    default=None,
    metavar="REGEX",
    help="Which of a launch's ranges names its layer: the innermost it matches (its first group, where it "
    "has one, is the name). Default: the innermost range (a PyTorch trace's module, or the operator called "
    "in its innermost record_function), or the kernel where none is open.",
)
@click.option(
    "--batch", "-b", type=WholeNumber(1, MAX_BATCH), default=1, show_default=True, help="The profile's batch size."
)
@db_option
@format_option
def import_profile(file, network, layers, batch, db, fmt):
    """Store another tool's profile as a run: an Nsight Compute report (.ncu-rep) or a PyTorch
    profiler trace (.json, .json.gz).

    Every kernel becomes a launch in the order it was launched, placed in a layer and phase by the
    ranges around it: a report's NVTX ranges, with every catalog metric it holds (under the names
    tracker's own ncu pass asks for); a trace's modules, record_function ranges and operators, with
    each kernel's real start, duration, grid and block, and the autograd engine's backward nodes
    marking the backward. The run records the file's GPU, how it was profiled and the file itself;
    `show`, `sql`, `export`, `compare` and the notebooks read it as any other run (implementation
    'imported').

    \b
    Examples:
      tracker import profile.ncu-rep
      tracker import profile.ncu-rep --layers 'stage_\\d+'
      tracker import alexnet.ncu-rep --network alexnet --batch 128
      tracker import trace.json.gz --network alexnet --batch 128
    """
    from tracker.importers import import_file
    from tracker.store import find_run, launch_count, open_store, run_dict

    net = build(network) if network else None
    say = (lambda line: click.echo(line, err=True)) if fmt != "table" else click.echo
    run_id = import_file(db, file, net, layers, batch, say)
    store = open_store(db, write=False)
    run = run_dict(find_run(store, run_id))
    summary = {"run_id": run_id, "network": run["network"], "launches": launch_count(store, run_id), **run["library"]}
    if fmt != "table":
        emit([summary], fmt)
        return
    click.echo(f"run {run_id} imported: {summary['launches']} launches of {run['network']} from {file}")
    click.echo(f"  stored in {store.where}; next: tracker show {run_id}, tracker export {run_id} --format perfetto")
