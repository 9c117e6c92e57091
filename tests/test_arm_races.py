"""An experiment's arm runs once and counts once, on SQLite and PostgreSQL, with real
`tracker experiment` processes on the model backend: 16 identical commands started together make
one experiment (the others refuse in one line), two resumes started together run each arm once,
and a signal or a kill between a run's completion and its arm's leaves one complete run per arm.
Each checks that every arm has exactly one complete run and that the report counts it once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from sqlalchemy import text

import tracker.profile
from tracker.analysis.experiments import results
from tracker.analysis.runtime import runtime
from tracker.errors import Interrupted, TrackerError
from tracker.experiment import run_experiment
from tracker.model import lookup
from tracker.nets import build
from tracker.store import experiment_ids, find_experiment, open_store
from tracker.store.queries import arm_rows

COMMAND = "experiment batch alexnet --batches 16,32 --backend model --device h100 --format csv".split()

# The tracker CLI with test hooks: each arm's prediction slowed by $RACE_SLOW seconds (so that the
# experiment outlives its rivals' planning), a pause of $RACE_PAUSE_S after the first call of
# $RACE_PAUSE, "module:function" (saying "paused" on stdout: the moment to signal), and the
# experiment's planning held until the file $RACE_GO exists (saying "ready" when there: every
# process plans at once, whatever its start-up took).
DRIVER = """
import importlib, os, sys, time
import tracker.profile
from tracker.cli import main

slow, pause, go = float(os.environ.get("RACE_SLOW", "0")), os.environ.get("RACE_PAUSE"), os.environ.get("RACE_GO")
predict = tracker.profile.predict

def slowly(*args, **kwargs):
    time.sleep(slow)
    return predict(*args, **kwargs)

tracker.profile.predict = slowly
if pause:
    module, name = pause.split(":")
    module = importlib.import_module(module)
    original, paused = getattr(module, name), []

    def stop(*args, **kwargs):
        result = original(*args, **kwargs)
        if not paused:
            paused.append(1)
            print("paused", flush=True)
            time.sleep(float(os.environ["RACE_PAUSE_S"]))
        return result

    setattr(module, name, stop)
if go:
    import tracker.store.experiments as experiments
    claim = experiments.claim_experiment

    def together(*args, **kwargs):
        print("ready", flush=True)
        while not os.path.exists(go):
            time.sleep(0.005)
        return claim(*args, **kwargs)

    experiments.claim_experiment = together
else:
    print("ready", flush=True)
sys.argv = ["tracker", *sys.argv[1:]]
main()
"""


def start(db: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, *COMMAND, "--db", db],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


def all_at_once(db: str, count: int, go, slow: float) -> list[tuple[int, str]]:
    """Start ``count`` identical commands, let them go together; each one's exit code and stderr."""
    processes = [start(db, RACE_SLOW=str(slow), RACE_GO=str(go)) for _ in range(count)]
    for process in processes:
        assert process.stdout.readline() == "ready\n"
    go.write_text("")
    ended = [process.communicate(timeout=300) for process in processes]
    return [(process.returncode, stderr) for process, (_, stderr) in zip(processes, ended)]


def assert_each_arm_counted_once(db: str) -> None:
    """One experiment, complete; each arm complete with exactly one complete run linked to it; the
    report's rows per batch are its arm's run's, once."""
    store = open_store(db, write=False)
    assert experiment_ids(store) == [1] and find_experiment(store, 1).status == "complete"
    arms = arm_rows(store, 1)
    assert [a.state for a in arms] == ["complete", "complete"]
    with store.connect() as conn:
        complete = conn.execute(
            text(
                "SELECT e.position, COUNT(*) FROM experiment_run e JOIN run r ON r.id = "
                "e.run_id WHERE r.status = 'complete' GROUP BY e.position ORDER BY e.position"
            )
        )
        assert [tuple(row) for row in complete] == [(0, 1), (1, 1)]
    report = results(store, 1, "batch")
    for arm in arms:
        own, reported = runtime(store, arm.run_id), report[report["batch"] == arm.spec["batch"]]
        assert list(reported["run_id"].unique()) == [arm.run_id] and len(reported) == len(own)
        assert reported["ms"].sum() == pytest.approx(own["ms"].sum())  # not doubled
    store.dispose()


def refused(stderr: str) -> bool:
    last = stderr.strip().splitlines()[-1]
    return last.startswith(
        (
            "Error: experiment e1 is already running in pid",
            "Error: experiment e1 is complete: the same command, started with this one, ran it",
        )
    )


@pytest.mark.slow
def test_sixteen_identical_commands_started_together_make_one_experiment(db, tmp_path):
    open_store(db, write=True).dispose()  # the schema first: the race is the experiment's, not the schema's
    ended = all_at_once(db, 16, tmp_path / "go", slow=1.0)
    assert sorted(code for code, _ in ended) == [0] + [1] * 15, ended
    assert all(refused(stderr) for code, stderr in ended if code == 1), ended
    assert_each_arm_counted_once(db)


def fail_batch_32(monkeypatch) -> None:
    predict = tracker.profile.predict

    def predict_or_fail(net, batch, *args, **kwargs):
        if batch == 32:
            raise TrackerError("made-up failure at batch 32")
        return predict(net, batch, *args, **kwargs)

    monkeypatch.setattr(tracker.profile, "predict", predict_or_fail)


@pytest.mark.slow
def test_two_resumes_started_together_run_each_arm_once(db, tmp_path, monkeypatch, runner):
    from tracker.cli import cli

    fail_batch_32(monkeypatch)
    assert runner.invoke(cli, [*COMMAND, "--db", db]).exit_code == 1
    assert [a.state for a in arm_rows(open_store(db, write=False), 1)] == ["complete", "failed"]
    ended = all_at_once(db, 2, tmp_path / "go", slow=1.0)
    assert sorted(code for code, _ in ended) == [0, 1], ended
    assert all(refused(stderr) for code, stderr in ended if code == 1), ended
    assert_each_arm_counted_once(db)
    assert [a.attempts for a in arm_rows(open_store(db, write=False), 1)] == [1, 2]


# Inside the transaction that marks arm 0's run and arm 0 complete, before it commits; just after it
# (where the run was once complete and its arm still running); before the experiment is settled.
PAUSES = {
    "in": "tracker.store.experiments:complete_arm",
    "after": "tracker.store.runs:_finish",
    "settling": "tracker.store.experiments:settle",
}


@pytest.mark.slow
@pytest.mark.parametrize("pause", PAUSES)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_signal_between_a_run_and_its_arm_leaves_one_complete_run_per_arm(db, pause, signum):
    process = start(db, RACE_PAUSE=PAUSES[pause], RACE_PAUSE_S="1")
    assert process.stdout.readline() == "ready\n"
    assert process.stdout.readline() == "paused\n"
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == (130 if signum == signal.SIGTERM else -signal.SIGKILL), stderr
    state = arm_rows(open_store(db, write=False), 1)[0].state
    assert state == ("running" if (pause, signum) == ("in", signal.SIGKILL) else "complete")
    resumed = subprocess.run(
        [sys.executable, "-m", "tracker", *COMMAND, "--db", db], capture_output=True, text=True, timeout=120
    )
    assert resumed.returncode == 0 and "resuming experiment e1" in resumed.stderr, resumed.stderr
    assert_each_arm_counted_once(db)


def test_a_signal_just_after_an_arm_is_claimed_marks_it(db, monkeypatch):
    """SIGTERM landing as the arm is marked running: raised inside the block that marks it (it once
    landed before it, and the arm stayed running)."""
    import tracker.store.experiments as experiments

    claim = experiments.start_arm

    def claim_then_signal(*args, **kwargs):
        claimed = claim(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)
        return claimed

    monkeypatch.setattr(experiments, "start_arm", claim_then_signal)
    with pytest.raises(Interrupted):
        run_experiment(db, "batch", build("alexnet"), 16, batches=(16, 32), backend="model", device=lookup("h100"))
    store = open_store(db, write=False)
    assert [(a.state, a.reason) for a in arm_rows(store, 1)] == [
        ("interrupted", "interrupted (Ctrl-C or SIGTERM)"),
        ("interrupted", "interrupted (Ctrl-C or SIGTERM)"),
    ]
    assert find_experiment(store, 1).status == "interrupted"


def test_the_report_counts_each_arm_s_run_once_whatever_else_is_linked(db):
    """A store written before the fix can link two complete runs to one arm: the report reads the
    run the arm points to."""
    from tracker.profile import profile
    from tracker.store.schema import ExperimentRun

    h100 = lookup("h100")
    run_experiment(db, "batch", build("alexnet"), 16, batches=(16, 32), backend="model", device=h100)
    extra = profile(db, build("alexnet"), 16, backend="model", device=h100).run_id
    store = open_store(db, write=True)
    with store.session() as session:
        session.add(
            ExperimentRun(experiment_id=1, run_id=extra, position=0, arm="batch 16", comparison="batch", baseline=True)
        )
    report = results(store, 1, "batch")
    assert set(report["run_id"]) == {a.run_id for a in arm_rows(store, 1)} and extra not in set(report["run_id"])
