"""Signals sent to a real `tracker experiment` process, on SQLite and PostgreSQL: Ctrl-C and
SIGTERM end it within 2 s, exit 130 with one line, the experiment marked interrupted and every
run it started linked to it; SIGKILL leaves it to show as interrupted once the process is gone."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tracker.store import experiment_dict, find_experiment, list_runs, open_store, run_sql

BATCHES = ",".join(str(b) for b in range(1, 301))  # model runs, a few per second: the signal lands mid-way


def start(db: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tracker", "experiment", "batch", "alexnet", "--batches", BATCHES,
                             "--backend", "model", "--device", "h100", "--db", db, "--format", "csv"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


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
