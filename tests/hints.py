"""Following tracker's printed hints as a newcomer does: every command a 'next: ...' line names is
run as printed, with the installed ``tracker`` command, in the newcomer's folder. The README's
commands can be followed the same way (``follow`` each one)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

TRACKER = Path(sys.executable).with_name("tracker")  # the entry point of the environment running the tests
HINT = "next: "


def next_commands(output: str) -> list[list[str]]:
    """The commands of every 'next: A, B' hint in ``output``, each as its words after 'tracker'."""
    commands = []
    for line in output.splitlines():
        if HINT not in line:
            continue
        for command in line.split(HINT, 1)[1].split(", "):
            words = shlex.split(command)
            assert words[0] == "tracker", f"a hint that is not a tracker command: {line!r}"
            commands.append(words[1:])
    return commands


def tracker(args: list[str], folder: Path) -> str:
    """``tracker ARGS`` in ``folder`` as a user types it; its stdout, once it exited 0."""
    done = subprocess.run([str(TRACKER), *args], cwd=folder, capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, f"tracker {shlex.join(args)} exited {done.returncode}: {done.stderr.strip()}"
    return done.stdout


def follow(args: list[str], folder: Path) -> list[str]:
    """Run ``tracker ARGS``, then every command its hints name, and theirs in turn; each command
    run, as typed."""
    ran = [shlex.join(["tracker", *args])]
    for command in next_commands(tracker(args, folder)):
        ran += follow(command, folder)
    return ran
