"""The Slurm executor on a real Slurm: a single-node cluster started here (tools/slurm_local.sh:
Debian's slurmctld, slurmd and munge, which .ci/run installs), its jobs writing into the CI
PostgreSQL server. Without Slurm or PostgreSQL these skip, unless TRACKER_REQUIRE_SLURM is set
(as in CI), where a skip would hide a missing engine. The arms run on the model backend."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tracker.store import find_experiment, find_run, open_store, run_sql
from tracker.store.queries import arm_rows

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
SWEEP = ["experiment", "batch", "alexnet", "--batches", "16,32,64", "--backend", "model", "--device", "h100"]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A running single-node Slurm cluster; SLURM_CONF points at it while the module runs."""
    ready = shutil.which("slurmctld") and shutil.which("sbatch") and os.geteuid() == 0
    if not ready:
        if os.environ.get("TRACKER_REQUIRE_SLURM"):
            pytest.fail("TRACKER_REQUIRE_SLURM is set but Slurm (slurmctld, sbatch; as root) is not here")
        pytest.skip("no Slurm here (Debian: slurmctld slurmd slurm-client munge, as root)")
    where = tmp_path_factory.mktemp("slurm")
    started = subprocess.run(["bash", str(ROOT / "tools/slurm_local.sh"), "start", str(where)])
    if started.returncode:  # stop what did come up: a daemon left holding its port fails the next run
        subprocess.run(["bash", str(ROOT / "tools/slurm_local.sh"), "stop", str(where)], check=False)
        pytest.fail(
            f"Slurm did not come up (tools/slurm_local.sh start: exit {started.returncode}); logs in {where}/log"
        )
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(where / "slurm.conf")
    yield where
    subprocess.run(["bash", str(ROOT / "tools/slurm_local.sh"), "stop", str(where)], check=False)
    if previous is None:
        os.environ.pop("SLURM_CONF")
    else:
        os.environ["SLURM_CONF"] = previous


def tracker(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tracker", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs
    )


def finish(process: subprocess.Popen, limit_s: float = 180) -> tuple[int, str]:
    output, _ = process.communicate(timeout=limit_s)
    return process.returncode, output


def wait_for(condition, what: str, limit_s: float = 60):
    deadline = time.monotonic() + limit_s
    while not (found := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return found


def schema_of(url: str) -> str:
    return url.rsplit("search_path%3D", 1)[1]


def test_a_sweep_survives_a_killed_arm_resumes_and_reports_like_a_local_one(slurm, pg_url, tmp_path):
    from sqlalchemy import create_engine, text

    from tracker.analysis.experiments import results

    logs = str(tmp_path / "logs")
    command = [*SWEEP, "--executor", "slurm", "--db", pg_url, "--logs", logs, "--poll", "0.5"]
    open_store(pg_url, write=True).dispose()  # the schema, so that the test can lock its layer table
    blocker = create_engine(pg_url).connect()  # the arms create their runs, then wait to write their layers
    blocker.execute(text(f"LOCK TABLE {schema_of(pg_url)}.layer IN EXCLUSIVE MODE"))
    coordinator = tracker(*command)
    store = open_store(pg_url, write=False)
    try:
        victim = wait_for(
            lambda: next((a for a in arm_rows(store, 1) if a.position == 1 and a.run_id), None),
            "arm 1 to create its run",
        )
        subprocess.run(["scancel", "--signal=KILL", victim.job], check=True)  # SIGKILL: it cannot report
        wait_for(lambda: arm_rows(store, 1)[1].state != "running", "the killed arm to be marked")
    finally:
        blocker.rollback()  # the others may write now
        blocker.close()
    code, output = finish(coordinator)
    assert code == 1, output
    arms = arm_rows(store, 1)
    assert [a.state for a in arms] == ["complete", "interrupted", "complete"], output  # killed from outside
    killed = arms[1]
    assert killed.reason.startswith(f"Slurm job {victim.job} ended") and "without reporting" in killed.reason
    assert killed.node and killed.log_path and Path(killed.log_path).is_file()
    run = find_run(store, killed.run_id)  # created, then killed before its layers: marked, and empty
    assert run.status == "interrupted" and run.error == killed.reason
    assert run_sql(store, f"SELECT COUNT(*) FROM layer WHERE run_id = {run.id}")[1] == [(0,)]
    assert f"batch 32: interrupted: Slurm job {victim.job} ended CANCELLED without reporting" in output
    assert find_experiment(store, 1).status == "interrupted"

    code, output = finish(tracker(*command))  # the same command again: resumed
    assert code == 0, output
    assert "resuming experiment e1: 2 of 3 arms complete (kept)" in output
    assert "submitted 1 arms as Slurm job array" in output
    resumed = arm_rows(store, 1)
    assert [a.state for a in resumed] == ["complete"] * 3 and [a.attempts for a in resumed] == [1, 2, 1]
    assert [resumed[i].run_id for i in (0, 2)] == [arms[i].run_id for i in (0, 2)]  # kept, not run again
    assert all(a.node and a.device_name == "H100 SXM5 80GB" for a in resumed)
    assert find_experiment(store, 1).status == "complete"

    local = str(tmp_path / "local.db")
    code, _ = finish(tracker(*SWEEP, "--db", local))
    assert code == 0
    ours, theirs = (
        results(open_store(db, write=False), 1, "batch")
        .drop(columns=["run_id"])
        .sort_values(["batch", "layer_id", "phase"])
        .reset_index(drop=True)
        for db in (pg_url, local)
    )
    assert ours.equals(theirs)  # the same table as the same experiment run here, one arm after another
    code, output = finish(tracker("report", "e1", "--db", pg_url, "--out", str(tmp_path / "report")))
    assert code == 0 and (tmp_path / "report" / "index.html").is_file(), output


def test_an_arm_that_cannot_reach_the_store_fails_in_one_line_and_is_rerun(slurm, pg_url, tmp_path):
    """Detached arms held in the queue; their role is refused a login; released, they fail at once.
    The same command again marks them with the line they printed and reruns them."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    admin = create_engine(pg_url.split("?")[0], isolation_level="AUTOCOMMIT")
    role = f"arms_{schema_of(pg_url)}"
    with admin.connect() as conn:
        conn.execute(text(f"CREATE ROLE {role} LOGIN"))
        conn.execute(text(f"GRANT ALL ON SCHEMA {schema_of(pg_url)} TO {role}"))
    url = make_url(pg_url).set(username=role).render_as_string(hide_password=False)
    command = [
        "experiment",
        "batch",
        "alexnet",
        "--batches",
        "16",
        "--gpus",
        "h100,a100",
        "--backend",
        "model",
        "--executor",
        "slurm",
        "--db",
        url,
        "--logs",
        str(tmp_path / "logs"),
        "--poll",
        "0.5",
    ]
    try:
        code, output = finish(tracker(*command, "--detach", "--sbatch", "--hold"))
        assert code == 0 and "detached" in output, output
        assert output.count("submitted 1 arms as Slurm job array") == 2  # one array per GPU kind
        store = open_store(pg_url, write=False)  # the test's own role: it can always log in
        jobs = [a.job for a in arm_rows(store, 1)]
        assert all(a.state == "queued" for a in arm_rows(store, 1))
        with admin.connect() as conn:
            conn.execute(text(f"ALTER ROLE {role} NOLOGIN"))
        subprocess.run(["scontrol", "release", *(job.split("_")[0] for job in jobs)], check=True)
        logs = [Path(a.log_path) for a in arm_rows(store, 1)]
        wait_for(lambda: all(log.is_file() and "Error:" in log.read_text() for log in logs), "the arms to fail")
        for log in logs:  # one clear line, no traceback
            lines = [line for line in log.read_text().splitlines() if line.strip()]
            assert len(lines) == 1 and lines[0].startswith("Error: cannot open postgresql"), lines
            assert "is not permitted to log in" in lines[0]
        with admin.connect() as conn:
            conn.execute(text(f"ALTER ROLE {role} LOGIN"))
        wait_for(
            lambda: (
                not subprocess.run(
                    ["squeue", "--noheader", f"--jobs={','.join(j.split('_')[0] for j in jobs)}"],
                    capture_output=True,
                    text=True,
                ).stdout.strip()
            ),
            "the jobs to leave",
        )
        code, output = finish(tracker(*command))
        assert code == 0, output
        assert output.count("without reporting: Error: cannot open postgresql") == 2, output
        assert [(a.gpu, a.state, a.attempts) for a in arm_rows(store, 1)] == [
            ("h100", "complete", 2),
            ("a100", "complete", 2),
        ]
        assert "GPU against GPU" in output and "gpu h100 -> a100" in output
        store.dispose()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP OWNED BY {role} CASCADE"))
            conn.execute(text(f"DROP ROLE {role}"))
        admin.dispose()
