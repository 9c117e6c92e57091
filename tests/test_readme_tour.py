"""The README's tour as a newcomer follows it, in a folder of their own: every `$ tracker ...` line
of its text blocks in order, then every command each one's 'next:' hint names. Each exits 0, and
every line of output the README shows is a line the command prints today (the README trims
output, so the check is line by line; lines naming the folder or the clock, and elided ones ('...'),
are the reader's own)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from hints import TRACKER, follow, next_commands

README = Path(__file__).resolve().parents[1] / "README.md"
THEIRS = re.compile(r"/tmp/|\.\.\.|\d{4}-\d\d-\d\dT\d\d:\d\d")  # the folder, an elision, a start time


def tour() -> list[tuple[list[str], list[str]]]:
    """Each `$ tracker ...` command of the README's text blocks, with the output lines shown under it."""
    steps: list[tuple[list[str], list[str]]] = []
    for block in re.findall(r"```text\n(.*?)```", README.read_text(), flags=re.DOTALL):
        for line in block.splitlines():
            if line.startswith("$ tracker "):
                steps.append((shlex.split(line[2:])[1:], []))
            elif steps and line.strip():
                steps[-1][1].append(line)
    return steps


def test_the_tour_starts_with_the_first_command():
    first, _ = tour()[0]
    assert first == ["profile", "alexnet", "--batch", "128"]
    assert "tracker profile alexnet --batch 128" in README.read_text().split("```sh\n", 1)[1].split("\n", 1)[0]


@pytest.mark.slow
def test_every_tour_command_and_hint_runs_and_prints_what_the_readme_shows(tmp_path):
    for args, shown in tour():
        done = subprocess.run(
            [str(TRACKER), *args], cwd=tmp_path, capture_output=True, text=True, check=False, timeout=600
        )
        assert done.returncode == 0, f"tracker {shlex.join(args)} exited {done.returncode}: {done.stderr.strip()}"
        printed = set((done.stderr + done.stdout).splitlines())
        missing = [line for line in shown if not THEIRS.search(line) and line not in printed]
        assert not missing, f"tracker {shlex.join(args)} no longer prints: {missing}"
        for hinted in next_commands(done.stdout + done.stderr):
            follow(hinted, tmp_path)  # each hint, and the hints it prints in turn, exits 0
