"""The ``tracker`` command. Thin: parse, call the library, print.

Every error a user can cause ends as one line on stderr and a non-zero exit, never a traceback
(``TRACKER_DEBUG=1`` shows one for a bug). Heavy libraries (SQLAlchemy, matplotlib) are imported
inside the commands that need them, so ``tracker --help`` and ``tracker model`` start fast.
"""

from __future__ import annotations

import os
import re
import sys

import click

from tracker import __version__
from tracker.cli import catalog, experiments, gpu, study, team, trace
from tracker.errors import TrackerError, first_line, shorten


def _short_quotes(message: str) -> str:
    """click quotes a bad value back whole (--format with 100 KB): each quoted run as shorten() cuts it."""
    return re.sub(r"'([^']{41,})'", lambda m: f"'{shorten(m.group(1))}'", message)


def _os_error(exc: OSError) -> str:
    """'cannot use report/x.png: Read-only file system': a file the checks before the work missed."""
    name = exc.filename if exc.filename is not None else exc.filename2
    reason = exc.strerror or first_line(exc)
    return f"cannot use {shorten(str(name), 200)}: {reason}" if name is not None else reason


def _fail(message: str, code: int) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


class TrackerGroup(click.Group):
    """A click group whose errors are one line each."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            code = super().main(args, prog_name or "tracker", complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help())
            sys.exit(0)
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
            _fail(_short_quotes(exc.format_message().replace("\n", " ")) + hint, 2)
        except click.ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        except click.Abort as exc:  # click turns Ctrl-C into Abort
            if isinstance(exc.__context__, KeyboardInterrupt):
                _fail("interrupted", 130)
            _fail("aborted", 1)
        except KeyboardInterrupt:
            _fail("interrupted", 130)
        except TrackerError as exc:
            _fail(str(exc), 1)
        except BrokenPipeError:  # `tracker ... | head`
            sys.stderr.close()
            sys.exit(1)
        except OSError as exc:  # a safety net: paths are checked before the work (tracker/paths.py)
            if os.environ.get("TRACKER_DEBUG"):
                raise
            _fail(_os_error(exc), 1)
        except Exception as exc:
            if os.environ.get("TRACKER_DEBUG"):
                raise
            if type(exc).__module__.split(".")[0] in ("sqlalchemy", "sqlite3", "psycopg"):
                _fail(f"database error: {first_line(getattr(exc, 'orig', None) or exc)}", 1)
            _fail(f"internal error: {type(exc).__name__}: {first_line(exc)} (TRACKER_DEBUG=1 shows the traceback)", 1)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=TrackerGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="tracker")
def cli() -> None:
    """Profile what each layer of a CNN does to an NVIDIA GPU, forward and backward.

    \b
    Start here:
      tracker profile alexnet --batch 128     profile into ./trace.db (no GPU: the analytic model)
      tracker runs                            what is stored
      tracker show last                       one run, layer by layer
      tracker model alexnet --device h100     FLOPs, bytes, roofline and memory; no GPU needed
      tracker sql "SELECT * FROM layer_phase" query the store (read-only)
      tracker report last                     paper 003's figures and findings for a run, in report-N/
      tracker experiment fusion alexnet       runs that answer one question; speedups per layer
      tracker compare 3 4                     one run against another, layer by layer
    """


# Every command, by the module that defines it; the modules know nothing of this group (help lists
# the commands alphabetically, so this order is the reader's, not the user's).
COMMANDS = (
    catalog.networks,
    catalog.devices,
    catalog.model,
    catalog.metrics,
    gpu.kernels,
    gpu.selftest,
    gpu.tune,
    experiments.experiment,
    experiments.experiments,
    experiments.arm,
    study.compare,
    study.agree,
    study.report,
    study.export,
    team.gate,
    team.history,
    team.serve,
    trace.profile,
    trace.import_profile,
    trace.runs,
    trace.show,
    trace.sql,
    trace.reader_role,
    trace.upgrade,
)
for command in COMMANDS:
    cli.add_command(command)


def main() -> None:
    """The tracker command as the process's own (its console script, ``python -m tracker``)."""
    from tracker.cli.options import PROCESS

    cli.main(obj=PROCESS)


__all__ = ["COMMANDS", "catalog", "cli", "experiments", "gpu", "main", "study", "trace"]
