"""The ``tracker`` command's entry point (pyproject's script, ``python -m tracker``): the one place
that catches Ctrl-C before the CLI has a handler of its own. It sits above every layer, so the
signal handling below it (``tracker.signals``) imports nothing of the CLI."""

from __future__ import annotations

import sys


def main() -> None:
    """The ``tracker`` command (pyproject's entry point, ``python -m tracker``): Ctrl-C anywhere,
    even while the CLI's heavy modules import (before its own handler runs), is one line and exit 130."""
    try:
        from tracker.cli import main as run

        run()
    except KeyboardInterrupt:
        sys.stderr.write("Error: interrupted\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
