"""Commands for a team's daily work: gate (a regression gate for CI) and history (one figure over
commits and dates)."""

from __future__ import annotations

import sys

import click

from tracker.cli.options import FORMATS, db_option, emit
from tracker.cli.output import records
from tracker.errors import TrackerError

GATE_FORMATS = (*FORMATS, "junit")
ACROSS = ("gpu", "network", "batch", "implementation")


def _bad_input(message: str) -> None:
    """The gate's bad input: one line and exit 2, apart from a regression's 1 (CI tells them apart)."""
    click.echo(f"Error: {message}", err=True)
    sys.exit(2)


@click.command()
@click.argument("run")
@click.option("--against", "base", required=True, metavar="BASE", help="The baseline run: an id, or 'last'.")
@click.option("--base-db", metavar="PATH|URL", default=None, help="BASE's trace database, where it is not --db's.")
@click.option(
    "--tolerance",
    type=click.FloatRange(0, 1000),
    default=5.0,
    show_default=True,
    help="How much worse, in %, a figure may be before it can fail (and it must be beyond both runs' spreads too).",
)
@click.option(
    "--metric", "metrics", multiple=True, metavar="NAME", help="Gate this counter too, per layer phase (repeatable)."
)
@click.option(
    "--across",
    multiple=True,
    type=click.Choice(ACROSS),
    help="Allow the runs to differ in this (repeatable); otherwise runs of two GPUs, networks, batches or "
    "implementations are refused.",
)
@db_option
@click.option("--format", "fmt", type=click.Choice(GATE_FORMATS), default="table", show_default=True,
              help="Output: a table, csv, json, or JUnit XML for CI.")  # fmt: skip
def gate(run, base, base_db, tolerance, metrics, across, db, fmt):
    """Fail (exit 1) when RUN is slower than the baseline run beyond noise; exit 0 otherwise.

    Per layer phase and for the whole iteration, a regression is a figure worse than the baseline's
    by more than --tolerance and by more than the two runs' spreads over their iterations (RUN's best
    iteration worse than the baseline's worst), so noise alone never fails the gate. Bad input
    (a run that is not there, runs of different workloads) exits 2.

    \b
    Examples:
      tracker gate last --against 12
      tracker gate last --against 1 --base-db baseline.db --format junit > gate.xml
      tracker gate 7 --against 3 --metric dram_read_bytes --tolerance 10
    """
    from tracker.analysis.gate import gate as judge_all
    from tracker.analysis.gate import junit
    from tracker.store import find_run, open_store

    try:
        store = open_store(db, write=False)
        base_store = open_store(base_db, write=False) if base_db else store
        ran, against = find_run(store, run).id, find_run(base_store, base).id
        frame = judge_all(store, ran, base_store, against, tolerance, metrics, across)
    except TrackerError as exc:
        _bad_input(str(exc))
    regressions = int(frame["regression"].sum())
    if fmt == "junit":
        click.echo(junit(frame, ran, against), nl=False)
    else:
        if fmt == "table":
            click.echo(f"run {ran} against base run {against}: {regressions} of {len(frame)} figures regressed "
                       f"(worse by over {tolerance:g} % and beyond both runs' spreads)")  # fmt: skip
        emit(records(frame), fmt)
    sys.exit(1 if regressions else 0)


@click.command()
@click.option("--network", required=True, metavar="NAME", help="The network the runs profiled.")
@click.option("--batch", "-b", type=click.IntRange(1), required=True, help="Their batch size.")
@click.option("--device", metavar="NAME", default=None, help="Only runs on this GPU (its name, or the catalog's).")
@click.option("--impl", "implementation", default=None, metavar="NAME", help="Only runs by this implementation.")
@click.option("--metric", default="iteration_ms", show_default=True, metavar="NAME",
              help="The figure: iteration_ms, or a catalog metric summed over the layer phases.")  # fmt: skip
@click.option("--plot", "plot_to", metavar="FILE.png|svg", default=None, help="Also draw it, one point a run.")
@db_option
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="Output: an aligned table for people, csv or json for programs.")  # fmt: skip
def history(network, batch, device, implementation, metric, plot_to, db, fmt):
    """One figure of one workload over the commits and dates of its runs, oldest first.

    Each run records the commit of tracker and of its kernels that made it, and whether either
    tree had uncommitted changes ('dirty'); a run from before schema v16 shows none.

    \b
    Examples:
      tracker history --network alexnet --batch 128
      tracker history --network alexnet --batch 128 --device h100 --plot alexnet-b128.png
      tracker history --network alexnet --batch 16 --metric dram_read_bytes --format csv
    """
    from tracker.analysis.history import check_metric, plot
    from tracker.analysis.history import history as figures
    from tracker.paths import check_file
    from tracker.store import open_store

    check_metric(metric)
    out = check_file(plot_to, (".png", ".svg")) if plot_to else None
    frame = figures(open_store(db, write=False), network, batch, device, implementation, metric)
    emit(records(frame), fmt)
    if out is not None:
        title = f"{network} batch {batch}{' on ' + device if device else ''}: {metric}"
        plot(frame, metric, title).savefig(out, dpi=120)
        click.echo(f"drew {out}", err=True)


LOOPBACK = ("127.0.0.1", "localhost", "::1")


@click.command()
@db_option
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="The address to listen on; another than loopback is warned of.",
)
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8050, show_default=True, help="The port (0: any free one)."
)
@click.option("--reader-url", metavar="URL", default=None, envvar="TRACKER_READER_URL",
              help="PostgreSQL: the read-only role the SQL box runs as (as tracker sql --reader-url).")  # fmt: skip
def serve(db, host, port, reader_url):
    """Serve the trace store as a local web app: runs, a run's roofline and tables, a layer phase's
    launches, two runs compared, one figure's history and a read-only SQL box.

    It listens on 127.0.0.1 unless --host says otherwise: the store is then open to whoever reaches
    that address (the SQL box reads every run), so it says so. Ctrl-C stops it.

    \b
    Examples:
      tracker serve                       # then open http://127.0.0.1:8050
      tracker serve --db postgresql+psycopg://tracker@dbhost/traces --reader-url postgresql+psycopg://reader@dbhost/traces
    """
    from tracker.serve.app import create_app, server

    app = create_app(db, reader_url)
    if host not in LOOPBACK:
        click.echo(f"warning: listening on {host}: anyone who reaches it reads this store", err=True)
    click.echo(f"serving on http://{host}:{port} (Ctrl-C stops)", err=True)
    server(app, host, port).run()
