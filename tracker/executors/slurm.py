"""The Slurm executor: an experiment's arms as one job array per GPU kind on an existing cluster.

Each array task runs ``tracker arm eN POSITION`` on its node with ``TRACKER_DB`` (the store's URL,
kept out of the job's command line) in its environment; the node must see the same Python
environment (a shared filesystem, as clusters have) and reach the PostgreSQL server. The task
records its own state, node and GPU in the store. This process then watches the store and
``squeue``: an arm whose job has left the queue without reporting (killed with SIGKILL, out of
memory, its node lost, or it could not reach the store) is marked with Slurm's word for how the
job ended and the last line of its log. Ctrl-C here cancels the jobs (``scancel``); ``--detach``
leaves them running, and running the same experiment again waits for them.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tracker.errors import TrackerError
from tracker.executors.base import Sweep
from tracker.nets import Network

# How a job that left the queue without reporting ended, in Slurm's words (squeue %T), and the arm
# state it leaves: killed from outside is interrupted, anything else failed.
KILLED = ("CANCELLED", "PREEMPTED", "DEADLINE", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "REVOKED")
QUEUED = (
    "PENDING",
    "CONFIGURING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESV_DEL_HOLD",
    "SUSPENDED",
    "STOPPED",
    "SIGNALING",
    "SPECIAL_EXIT",
    "RESIZING",
)
RUNNING = ("RUNNING", "COMPLETING", "STAGE_OUT")
COMMANDS = ("sbatch", "squeue", "scancel")


@dataclass(frozen=True)
class Slurm:
    """``sbatch``: extra sbatch options (partition, account, time limit; ``{gpu}`` becomes the arm's
    GPU kind). ``logs``: where the tasks write their output (a directory the nodes share)."""

    sbatch: tuple[str, ...] = ()
    logs: str = "tracker-logs"
    poll_s: float = 5.0
    detach: bool = False
    name: ClassVar[str] = "slurm"

    def check(self, db: str | None, net: Network, backend: str) -> None:
        """A store the nodes can share, Slurm's commands, a network the nodes can rebuild by name, and
        a log directory, before anything is written."""
        from tracker.nets import build
        from tracker.store import resolve

        target = resolve(db)
        if "://" not in target or target.startswith("sqlite"):
            raise TrackerError(
                f"--executor slurm needs a store every node can write: a PostgreSQL URL "
                f"(--db postgresql://user@host/db), not the SQLite file {target}"
            )
        missing = [c for c in COMMANDS if shutil.which(c) is None]
        if missing:
            raise TrackerError(
                f"--executor slurm needs Slurm's {', '.join(missing)} on PATH: run on a node "
                "that submits jobs (a login node)"
            )
        try:
            same = build(net.name, **net.options).layers == net.layers
        except TrackerError:
            same = False
        if not same:
            raise TrackerError(
                f"network '{net.name}' is not one tracker builds by name with these options; "
                "a cluster's nodes rebuild it from its name"
            )
        try:
            Path(self.logs).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TrackerError(f"cannot create the log directory {self.logs}: {exc.strerror}") from None
        if not os.access(self.logs, os.W_OK):
            raise TrackerError(f"cannot write the log directory {self.logs}: permission denied")

    def reconcile(self, store, experiment_id: int, echo: Callable[[str], None]) -> None:
        """Mark the arms whose jobs left the queue without reporting; arms still queued or running in
        Slurm are left to finish (the resumed experiment waits for them)."""
        from tracker.store.queries import arm_rows
        from tracker.store.states import OPEN

        open_arms = [a for a in arm_rows(store, experiment_id) if a.state in OPEN]
        jobs = _squeue({a.job.split("_")[0] for a in open_arms if a.job})
        for arm in open_arms:
            self._check_job(store, experiment_id, arm, jobs, echo)

    def run(self, sweep: Sweep) -> None:
        from tracker.store.queries import arm_rows

        arms = arm_rows(sweep.store, sweep.experiment_id)
        self._submit(sweep, [a for a in arms if a.state == "queued" and a.job is None])
        if self.detach:
            sweep.echo(
                f"detached: follow with `tracker experiments e{sweep.experiment_id}`; run the same "
                "command again to wait for the arms (and to rerun any that failed)"
            )
            return
        try:
            self._wait(sweep)
        except KeyboardInterrupt:
            self._cancel(sweep)
            raise

    def _submit(self, sweep: Sweep, arms: list) -> None:
        """One job array per GPU kind asked for; each arm records its job and its log's path."""
        from tracker.store.experiments import update_arm

        for gpu in dict.fromkeys(a.gpu for a in arms):
            group = [a for a in arms if a.gpu == gpu]
            job = self._sbatch(sweep, [a.position for a in group], gpu)
            for arm in group:
                update_arm(
                    sweep.store,
                    sweep.experiment_id,
                    arm.position,
                    job=f"{job}_{arm.position}",
                    log_path=str(self._log(sweep.experiment_id, arm.position, job)),
                )
            sweep.echo(
                f"submitted {len(group)} arms as Slurm job array {job}"
                + (f" on GPU kind {gpu}" if gpu else "")
                + f"; logs in {Path(self.logs).resolve()}"
            )

    def _sbatch(self, sweep: Sweep, positions: list[int], gpu: str | None) -> str:
        from tracker.store import resolve

        gres = [] if sweep.backend == "model" else [f"--gres=gpu:{gpu}:1" if gpu else "--gres=gpu:1"]
        extra = [arg.replace("{gpu}", gpu or "") for arg in self.sbatch]
        command = [
            "sbatch",
            "--parsable",
            f"--array={','.join(map(str, positions))}",
            f"--job-name=tracker-e{sweep.experiment_id}",
            f"--output={self._log(sweep.experiment_id, '%a', '%A')}",
            *gres,
            *extra,
        ]
        script = (
            "#!/bin/sh\n"
            f'exec {shlex.quote(sys.executable)} -m tracker arm e{sweep.experiment_id} "$SLURM_ARRAY_TASK_ID"\n'
        )
        env = dict(os.environ, TRACKER_DB=_url(resolve(sweep.db)))
        done = subprocess.run(command, input=script, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise TrackerError(f"sbatch refused the arms: {_last_line(done.stderr) or f'exit {done.returncode}'}")
        return done.stdout.strip().split(";")[0]

    def _log(self, experiment_id: int, position: int | str, job: str) -> Path:
        return Path(self.logs).resolve() / f"tracker-e{experiment_id}-arm{position}-{job}.log"

    def _wait(self, sweep: Sweep) -> None:
        """Until every arm has ended: say each change of state, and mark the arms whose jobs are gone."""
        from tracker.store.queries import arm_rows
        from tracker.store.states import OPEN

        said: dict[int, str] = {}
        while True:
            self.reconcile(sweep.store, sweep.experiment_id, sweep.echo)
            arms = arm_rows(sweep.store, sweep.experiment_id)
            for arm in arms:
                if said.get(arm.position) != arm.state:
                    said[arm.position] = arm.state
                    sweep.echo(_line(arm))
            if all(a.state not in OPEN for a in arms):
                return
            time.sleep(self.poll_s)

    def _check_job(self, store, experiment_id: int, arm, jobs: dict[str, str], echo) -> None:
        """Mark ``arm`` if its job has left the queue (or never got one) without the arm reporting."""
        from tracker.store.experiments import end_arm
        from tracker.store.queries import find_arm
        from tracker.store.states import OPEN

        state = jobs.get(arm.job or "")
        if state in QUEUED or state in RUNNING:
            return
        arm = find_arm(store, experiment_id, arm.position)  # it may have reported since squeue looked
        if arm.state not in OPEN:
            return
        log = _tail(arm.log_path)
        how = (
            f"Slurm job {arm.job} ended {state}"
            if state
            else (f"Slurm job {arm.job} left the queue" if arm.job else "it was never submitted")
        )
        last = _last_line(log)
        reason = f"{how} without reporting" + (f": {last}" if last else "")
        ended = "interrupted" if state in KILLED else "failed"
        if end_arm(store, experiment_id, arm.position, ended, reason, log):
            echo(f"{arm.label}: {ended}: {reason}")

    def _cancel(self, sweep: Sweep) -> None:
        """Ctrl-C: cancel the experiment's jobs still queued or running, and mark their arms."""
        from tracker.store.experiments import end_arm
        from tracker.store.queries import arm_rows
        from tracker.store.states import OPEN

        arms = [a for a in arm_rows(sweep.store, sweep.experiment_id) if a.state in OPEN]
        if arms:
            subprocess.run(["scancel", *sorted({a.job for a in arms if a.job})], capture_output=True)
            for arm in arms:
                end_arm(
                    sweep.store,
                    sweep.experiment_id,
                    arm.position,
                    "interrupted",
                    f"the experiment was interrupted: Slurm job {arm.job} cancelled",
                )
            sweep.echo(f"cancelled {len(arms)} Slurm jobs")


def _squeue(arrays: set[str]) -> dict[str, str]:
    """'array_task' -> Slurm's state for the tasks of these job arrays still known to Slurm."""
    if not arrays:
        return {}
    done = subprocess.run(
        ["squeue", "--noheader", "--array", "--states=all", f"--jobs={','.join(sorted(arrays))}", "--format=%i %T"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 and "Invalid job id" not in done.stderr:
        raise TrackerError(f"squeue failed: {_last_line(done.stderr) or f'exit {done.returncode}'}")
    return dict(line.split(None, 1) for line in done.stdout.splitlines() if " " in line.strip())


def _tail(path: str | None) -> str:
    """The last lines of a task's log (as many as an arm's row keeps), where this machine can read it."""
    from tracker.store.experiments import LOG_LINES

    try:
        text = Path(path).read_text(errors="replace") if path else ""
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-LOG_LINES:])


def _line(arm) -> str:
    where = f" on {arm.node}" + (f" ({arm.device_name})" if arm.device_name else "") if arm.node else ""
    run = f", run {arm.run_id}" if arm.run_id and arm.state == "complete" else ""
    why = f": {arm.reason}" if arm.reason and arm.state in ("failed", "interrupted") else ""
    return f"{arm.label}: {arm.state}{where}{run}{why}"


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _url(target: str) -> str:
    """The store's URL with its password, for the tasks' environment (never their command line)."""
    from sqlalchemy.engine import make_url

    return make_url(target).render_as_string(hide_password=False)
