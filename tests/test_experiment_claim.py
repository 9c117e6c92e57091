"""One experiment for any number of identical `tracker experiment` commands started together, on
SQLite and PostgreSQL: 16 real commands on the model backend, each held at the claim until all are
there and then let go one after another (as commands that start together reach the claim at
different moments), with nothing stored before, beside a finished experiment, and beside a killed
one. However fast the first runs the experiment, the others get its id: exactly one experiment
results, and every command names it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import timedelta

import pytest

from tracker.errors import TrackerError
from tracker.experiment import run_experiment
from tracker.model import lookup
from tracker.nets import build
from tracker.store import experiment_ids, find_experiment, open_store
from tracker.store.queries import arm_rows

COMMAND = "experiment batch alexnet --batches 16,32 --backend model --device h100 --format csv".split()
COMMANDS = 16
APART_S = 0.2  # between one command's claim and the next: the last claims 3 s after the first

# The tracker CLI with test hooks: the claim held until the file $CLAIM_GO exists (saying "ready"
# when there), then $CLAIM_AFTER_S more; and with $CLAIM_KILL, the process killed (SIGKILL) once
# its first arm has ended.
DRIVER = """
import os, signal, sys, time
import tracker.store.experiments as experiments
from tracker.cli import main

claim, settle = experiments.claim_experiment, experiments.settle

def held_at_the_claim(*args, **kwargs):
    print("ready", flush=True)
    while not os.path.exists(os.environ["CLAIM_GO"]):
        time.sleep(0.005)
    time.sleep(float(os.environ["CLAIM_AFTER_S"]))
    return claim(*args, **kwargs)

def settle_then_die(*args, **kwargs):
    settle(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)

experiments.claim_experiment = held_at_the_claim
if os.environ.get("CLAIM_KILL"):
    experiments.settle = settle_then_die
sys.argv = ["tracker", *sys.argv[1:]]
main()
"""


def start(db: str, go, after_s: float = 0.0, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, *COMMAND, "--db", db],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CLAIM_GO": str(go), "CLAIM_AFTER_S": str(after_s), **env},
    )


def together(db: str, go) -> list[tuple[int, str]]:
    """Start the identical commands, hold each at the claim until all are there, let them claim
    ``APART_S`` apart; each one's exit code and stderr."""
    processes = [start(db, go, i * APART_S) for i in range(COMMANDS)]
    for process in processes:
        assert process.stdout.readline() == "ready\n"
    go.write_text("")
    ended = [process.communicate(timeout=600) for process in processes]
    return [(process.returncode, stderr) for process, (_, stderr) in zip(processes, ended)]


def named(stderr: str) -> int:
    """The experiment a command names: the one it ran, or in its one-line refusal the one it left
    to another."""
    ran = re.search(r"^experiment e(\d+) in ", stderr, re.MULTILINE)
    last = stderr.strip().splitlines()[-1]
    refused = re.match(r"Error: experiment e(\d+) (is already running in pid|is complete: the same command)", last)
    assert ran or refused, stderr
    return int((ran or refused).group(1))  # type: ignore[union-attr]


def assert_one_experiment(db: str, ended: list[tuple[int, str]], before: list[int]) -> None:
    """One experiment more than ``before`` (none, when the one before was resumed), complete, its
    arms each run once; one command ran it, the others refused in one line, all naming it."""
    store = open_store(db, write=False)
    ids = experiment_ids(store)
    made = [i for i in ids if i not in before]
    assert len(made) <= 1 and len(ids) == len(before) + len(made), (ids, ended)
    ours = made[0] if made else before[-1]
    assert sorted(code for code, _ in ended) == [0] + [1] * (COMMANDS - 1), ended
    assert [named(stderr) for _, stderr in ended] == [ours] * COMMANDS
    assert find_experiment(store, ours).status == "complete"
    assert [(a.state, a.attempts) for a in arm_rows(store, ours)] == [("complete", 1), ("complete", 1)]
    store.dispose()


@pytest.mark.slow
def test_identical_commands_started_together_make_one_experiment(db, tmp_path):
    open_store(db, write=True).dispose()  # the schema first: the race is the experiment's
    assert_one_experiment(db, together(db, tmp_path / "go"), before=[])


@pytest.mark.slow
def test_identical_commands_beside_a_finished_experiment_make_one_new_one(db, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "tracker", *COMMAND, "--db", db],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert_one_experiment(db, together(db, tmp_path / "go"), before=[1])


@pytest.mark.slow
def test_identical_commands_beside_a_killed_experiment_resume_it_once(db, tmp_path):
    killed = start(db, tmp_path / "first", CLAIM_KILL="1")
    (tmp_path / "first").write_text("")
    killed.communicate(timeout=300)
    assert killed.returncode == -9
    store = open_store(db, write=False)
    assert find_experiment(store, 1).status == "running"
    assert [a.state for a in arm_rows(store, 1)] == ["complete", "queued"]
    assert_one_experiment(db, together(db, tmp_path / "go"), before=[1])


def test_a_complete_experiment_is_this_command_s_only_if_it_finished_after_the_command_started(db):
    """The rule that tells a twin's experiment from an earlier answer, whatever the timing: one
    that finished after this command started is its twin's (refused, named); one that finished
    before it started is a past answer (a new experiment)."""
    h100, net = lookup("h100"), build("alexnet")

    def again(started):
        return run_experiment(db, "batch", net, 16, batches=(16, 32), backend="model", device=h100, started=started)

    first = again(None)
    finished = find_experiment(open_store(db, write=False), first).finished_at
    with pytest.raises(TrackerError, match=rf"^experiment e{first} is complete: the same command, started with this"):
        again(finished - timedelta(seconds=1))
    assert again(None) == first + 1
