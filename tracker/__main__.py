"""The ``tracker`` command's entry point (pyproject's script, ``python -m tracker``): the one place
that catches Ctrl-C and SIGTERM before the CLI has handlers of its own. It sits above every layer,
so the signal handling below it (``tracker.signals``) imports nothing of the CLI."""

from __future__ import annotations

import sys

from tracker import signals


def main() -> None:
    """The ``tracker`` command (pyproject's entry point, ``python -m tracker``): Ctrl-C or SIGTERM at
    any moment, even while the CLI's heavy modules import or once its work is done, is one line
    and exit 130. The handlers go in first: a signal that finds none kills the process silently."""
    interrupted = False
    try:
        signals.raise_from_now()
        from tracker.cli import main as run

        run()
    except KeyboardInterrupt:  # SIGTERM's Interrupted too
        interrupted = True
    finally:
        if signals.hold_to_exit() or interrupted:  # hold_to_exit: one came as the command finished
            sys.stderr.write("Error: interrupted\n")
            sys.exit(130)


if __name__ == "__main__":
    main()
