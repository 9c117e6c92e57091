"""Signals sent to a real `tracker experiment` process, on SQLite and PostgreSQL: Ctrl-C and
SIGTERM end it within 2 s, exit 130 with one line, the experiment marked interrupted and every
run it started linked to it; SIGKILL leaves it to show as interrupted once the process is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tracker.store import experiment_dict, find_experiment, list_runs, open_store, run_sql

BATCHES = ",".join(str(b) for b in range(1, 301))  # model runs, a few per second: the signal lands mid-way


def start(db: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tracker",
            "experiment",
            "batch",
            "alexnet",
            "--batches",
            BATCHES,
            "--backend",
            "model",
            "--device",
            "h100",
            "--db",
            db,
            "--format",
            "csv",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # as from a terminal


def linked(db: str) -> int:
    try:
        return run_sql(open_store(db, write=False), "SELECT COUNT(*) FROM experiment_run")[1][0][0]
    except Exception:  # not created yet
        return 0


def wait_until_running(db: str, runs: int = 3, limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while linked(db) < runs:
        assert time.monotonic() < deadline, "the experiment never started its runs"
        time.sleep(0.05)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_ends_an_experiment_within_two_seconds_marked_and_linked(db, signum):
    process = start(db)
    wait_until_running(db)
    process.send_signal(signum)
    sent = time.monotonic()
    _, stderr = process.communicate(timeout=30)
    assert time.monotonic() - sent < 2.0
    assert process.returncode == 130 and stderr.strip().splitlines()[-1] == "Error: interrupted"
    store = open_store(db, write=False)
    assert experiment_dict(find_experiment(store, "e1"))["status"] == "interrupted"
    linked = run_sql(store, "SELECT r.id, e.run_id FROM run r LEFT JOIN experiment_run e ON e.run_id = r.id")[1]
    assert all(link is not None for _, link in linked)  # every run it started is linked
    statuses = [run["status"] for run in list_runs(store)]  # as stored, or interrupted if its process is gone
    assert set(statuses[:-1]) == {"complete"} and statuses[-1] in ("complete", "interrupted")


def test_a_killed_experiment_shows_as_interrupted(db):
    process = start(db)
    wait_until_running(db)
    process.kill()
    process.wait(timeout=30)
    store = open_store(db, write=False)
    experiment = find_experiment(store, "e1")
    assert experiment.status == "running"  # as stored: nothing could mark it
    assert experiment_dict(experiment)["status"] == "interrupted"


@pytest.mark.parametrize("table", ["run", "experiment"])
def test_a_signal_while_a_row_is_created_leaves_it_marked(db, table):
    """SIGTERM landing in the transaction that creates a run's or an experiment's row: held until
    the row exists, then raised where the row is marked interrupted (it once stayed running)."""
    import os

    from sqlalchemy import event
    from sqlalchemy.orm import Session

    from tracker.errors import Interrupted
    from tracker.store import recording, recording_experiment

    store = open_store(db, write=True)
    fired: list[int] = []

    def signal_once(session) -> None:
        if not fired:
            fired.append(1)
            os.kill(os.getpid(), signal.SIGTERM)

    event.listen(Session, "before_commit", signal_once)
    try:
        with pytest.raises(Interrupted):
            if table == "run":
                with recording(
                    store,
                    network="alexnet",
                    network_options={},
                    batch=1,
                    phases="both",
                    dtype_bits=32,
                    variants={},
                    l1_bypass=False,
                    backend="model",
                    backend_reason="test",
                    repeat=0,
                ):
                    pytest.fail("the run's block started after the signal")
            else:
                with recording_experiment(
                    store, [], "local", kind="batch", network="alexnet", network_options={}, settings={}
                ):
                    pytest.fail("the experiment's block started after the signal")
    finally:
        event.remove(Session, "before_commit", signal_once)
    assert fired and run_sql(store, f"SELECT status FROM {table}")[1] == [("interrupted",)]


# provenance() reads git once a process, before its first run: done before "ready", so that the
# signal lands in the loop of runs, which is what is tested, not in git (tracker/provenance.py)
CREATE_ROWS = """
import sys
from tracker.provenance import provenance
from tracker.store import open_store, recording
store = open_store(sys.argv[1], write=True)
provenance()
print("ready", flush=True)
while True:
    with recording(store, network="alexnet", network_options={}, batch=1, phases="both", dtype_bits=32,
                   variants={}, l1_bypass=False, backend="model", backend_reason="test", repeat=0):
        pass
"""


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_at_any_moment_leaves_no_row_running(db, signum):
    """A process that does nothing but create and finish runs, signalled at 12 moments: every row
    it started is marked, never left running (the probe saw 6 in 300 trials). A signal between two
    runs interrupts none, so some trials mark no row."""
    import random

    open_store(db, write=True).dispose()
    for _ in range(12):
        process = subprocess.Popen(
            [sys.executable, "-c", CREATE_ROWS, db],
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        assert process.stdout.readline() == "ready\n"
        time.sleep(random.uniform(0, 0.05))
        process.send_signal(signum)
        process.wait(timeout=30)
    statuses = dict(run_sql(open_store(db, write=False), "SELECT status, COUNT(*) FROM run GROUP BY status")[1])
    assert "running" not in statuses and 0 < statuses.get("interrupted", 0) <= 12


IGNORING_CTRL_C = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)  # as nohup or a background job starts a process
from tracker.store import open_store
store = open_store(sys.argv[1], write=True)
print("ready", flush=True)
for _ in range(6):
    with store.session():
        time.sleep(0.25)
print("done", flush=True)
"""


@pytest.mark.slow  # a process, Ctrl-C three times over 1.5 s
def test_a_process_that_ignores_ctrl_c_is_not_interrupted_inside_a_transaction(db):
    process = subprocess.Popen([sys.executable, "-c", IGNORING_CTRL_C, db], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "ready\n"
    for _ in range(3):
        time.sleep(0.3)
        process.send_signal(signal.SIGINT)
    assert process.communicate(timeout=30)[0] == "done\n" and process.returncode == 0


def _takes_sigterm(pid: int) -> bool:
    """Whether the process has a handler of its own for SIGTERM (Linux: SigCgt in /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            caught = next(line for line in status if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1)


@pytest.mark.slow  # 30 short commands, about a second each
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc/PID/status to see the handler go in")
def test_a_signal_at_any_moment_of_a_command_is_one_line_and_exit_130(tmp_path):
    """SIGINT and SIGTERM at 30 random moments of `tracker runs`, from the moment its handlers are in
    (the first thing it does; the probe saw a silent -15 in 23 of 32) to its end: exit 130 and one
    line, or, for a signal that comes as it exits, its whole output and exit 0."""
    import random

    open_store(str(tmp_path / "trace.db"), write=True).dispose()
    command = [sys.executable, "-m", "tracker", "runs", "--db", str(tmp_path / "trace.db")]
    started = time.monotonic()
    whole = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    duration = time.monotonic() - started
    assert whole.returncode == 0, whole.stderr
    for trial in range(30):
        signum = (signal.SIGINT, signal.SIGTERM)[trial % 2]
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # noqa: PLW1509
        while not _takes_sigterm(process.pid):
            assert process.poll() is None, "the command ended without ever taking SIGTERM"
            time.sleep(0.0005)
        time.sleep(random.uniform(0, duration))
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=60)
        outcome = (trial, signum, process.returncode, stderr[-300:])
        if process.returncode == 0:  # it had finished its work
            assert (stdout, stderr) == (whole.stdout, ""), outcome
        else:  # click closes a terminal's ^C echo with a blank line first
            assert process.returncode == 130 and stderr.split("\n") in (
                ["Error: interrupted", ""],
                ["", "Error: interrupted", ""],
            ), outcome


SIGNALS_AT_THE_CLI = """
import signal, sys, types
cli = types.ModuleType("tracker.cli")  # stands in for the CLI, to see what is in place when it loads
cli.main = lambda: print(signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None), "click" in sys.modules)
sys.modules["tracker.cli"] = cli
from tracker.__main__ import main
main()
"""


def test_the_handlers_go_in_before_the_cli_imports():
    done = subprocess.run(
        [sys.executable, "-c", SIGNALS_AT_THE_CLI], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "True False\n", "")
