"""Option bundles shared by commands: one --format, one --db, one set of network options."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import click

from tracker.cli.output import FORMATS, render
from tracker.errors import is_digits, shorten
from tracker.nets import OPTIONS
from tracker.profilers.ncu import CACHE_CONTROL, CLOCK_CONTROL

PROCESS = "the process's own command"  # the root context's obj where the tracker command is the process


def command_started() -> datetime | None:
    """When this command started: the process's start where the command is the process's own (the
    console script, ``python -m tracker``), else None (now, to the library). Identical commands
    started together are told apart from a later one by it, however long each took to start."""
    if click.get_current_context().find_root().obj != PROCESS:
        return None  # invoked in a process that did other things first (a test's CliRunner, a notebook)
    from tracker.processes import started_at

    return started_at()


class FiniteRange(click.FloatRange):
    """A FloatRange that refuses nan too: nan fails no comparison, so a range alone lets it through."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if number != number:
            self.fail(f"{value!r} is not a number", param, ctx)
        return number


class WholeNumber(click.IntRange):
    """An IntRange that takes digits only (``tracker.errors.is_digits``): click's INT is Python's
    int(), which also takes '1_0', ' 8' and '+1'."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not is_digits(value):
            self.fail(f"{shorten(value)!r} is not a whole number (digits only)", param, ctx)
        return super().convert(value, param, ctx)


def expanded(ctx, param, value: str | None) -> str | None:
    """A path option's callback: ~ expanded as --db's and --out's are (else '~/x' is a folder named '~')."""
    from tracker.paths import expand

    return None if value is None else str(expand(value))


def output_file(ctx, param, value: str | None) -> str | None:
    """A callback for an option naming a file tracker may write: checked as it enters, whatever
    the backend or executor ends up using it (``tracker.paths.check_file``; its error is one line)."""
    from tracker.paths import check_file

    return None if value is None else str(check_file(value, None))


def output_dir(ctx, param, value: str | None) -> str | None:
    """As ``output_file``, for a directory; a default left as it is is checked where it is used."""
    if value is None or ctx.get_parameter_source(param.name) == click.core.ParameterSource.DEFAULT:
        return expanded(ctx, param, value)
    from tracker.paths import check_dir

    return str(check_dir(value))


format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="Output: an aligned table for people, csv or json for programs.",
)

db_option = click.option(
    "--db",
    metavar="PATH|URL",
    default=None,
    help="Trace database: a SQLite file or a SQLAlchemy URL (postgresql://...). Default: $TRACKER_DB, else ./trace.db.",
)


def ncu_options(command: Callable) -> Callable:
    """--clock-control and --cache-control: how Nsight Compute runs pass 2, recorded on the run."""
    command = click.option(
        "--cache-control",
        type=click.Choice(CACHE_CONTROL),
        default="all",
        show_default=True,
        help="ncu: all flushes every cache before each replayed pass (cold-cache hit rates); none keeps them warm.",
    )(command)
    return click.option(
        "--clock-control",
        type=click.Choice(CLOCK_CONTROL),
        default="base",
        show_default=True,
        help="ncu: base locks the GPU's clocks at base for comparable counters (falls back to none, "
        "saying why, where locking is refused); none leaves them free.",
    )(command)


def network_options(command: Callable) -> Callable:
    """Add every network option (``--depth``, ``--conv-type``, ...); each network takes some."""
    for opt in reversed(OPTIONS):
        kind: click.ParamType | type[str]
        if opt.choices and opt.type is str:
            kind = click.Choice(opt.choices)
        elif opt.choices:
            kind = WholeNumber(min(opt.choices), max(opt.choices))
        else:
            kind = WholeNumber(min=1) if opt.type is int else str
        command = click.option(
            "--" + opt.name.replace("_", "-"),
            opt.name,
            type=kind,
            default=None,
            help=f"[{', '.join(n for n in _takers(opt.name))}] {opt.help}.",
        )(command)
    return command


def _takers(option: str) -> list[str]:
    from tracker.nets import NETWORKS

    return [name for name, entry in NETWORKS.items() if option in entry.options]


def net_kwargs(kwargs: dict) -> dict:
    """Pop the network options out of a command's keyword arguments."""
    return {opt.name: kwargs.pop(opt.name) for opt in OPTIONS}


def emit(rows: list[dict], fmt: str, columns=None) -> None:
    click.echo(render(rows, fmt, columns))
