"""Writing and finding experiments: an ``experiment`` row first (status running) with its planned
arms (queued), each arm's run linked as it is created, each arm's outcome as it ends, and the
experiment's outcome from its arms' (``settle``). Re-running an unfinished experiment finds it
(``unfinished``) and queues its arms that did not complete.

Each arm runs once and counts once: one process at a time finds or creates an experiment (the
planning lock), so identical commands started together make one, and the others are refused
while its process lives; a resumer takes the experiment over only if no other took it since
(``take_over``); an arm is claimed by a conditional update from queued (``start_arm``), only an
arm that ended short is queued again (``requeue``), and a run is marked complete in the
transaction that completes its arm (``complete_arm``). An arm's one run is ``experiment_arm.run_id``;
``experiment_run`` keeps every attempt's."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Callable, Iterator, Sequence

from sqlalchemy import select, text, update

from tracker import __version__
from tracker.errors import TrackerError
from tracker.store.db import Store
from tracker.processes import process_alive, this_process
from tracker.signals import held, interruptible
from tracker.store.queries import arm_rows, find_arm
from tracker.store.runs import ended_by
from tracker.store.schema import Experiment, ExperimentArm, ExperimentRun, Run
from tracker.store.states import FINAL, OPEN, SHORT, arm_state

LOG_LINES = 40  # the last lines of an arm's output kept in its row
_PG_PLANNING_LOCK = 72532  # advisory lock id: one process finds or creates an experiment at a time


def link_arm(session, experiment_id: int, position: int, run_id: int) -> None:
    """Link an arm's run to the experiment in ``session``: the transaction that creates the run, so
    that no run of the experiment, interrupted or not, is ever left unlinked."""
    arm = session.get(ExperimentArm, (experiment_id, position))
    session.add(ExperimentRun(experiment_id=experiment_id, run_id=run_id, position=position, arm=arm.label,
                              comparison=arm.comparison, baseline=arm.baseline))
    arm.run_id = run_id


def complete_arm(session, experiment_id: int, position: int, run_id: int, log: str) -> None:
    """Mark the arm complete with its run in ``session``: the transaction that marks the run
    complete, so that a signal or a kill between the two cannot leave a complete run behind an
    arm that a resume would run again. Only while the arm still runs this run."""
    device = select(Run.device_name).where(Run.id == run_id).scalar_subquery()
    session.execute(update(ExperimentArm).where(
        ExperimentArm.experiment_id == experiment_id, ExperimentArm.position == position,
        ExperimentArm.state == "running", ExperimentArm.run_id == run_id).values(
        state="complete", reason=None, finished_at=_now(), log=log, device_name=device))


@contextmanager
def recording_experiment(store: Store, arms: Sequence[dict], executor: str, *, resume: bool = False,
                         reconcile: Callable[[int], None] = lambda experiment_id: None,
                         **fields) -> Iterator[int]:
    """Create an experiment from ``fields`` (kind, network, network_options, settings) with its
    ``arms`` queued for ``executor``, or with ``resume`` take over the unfinished one planned alike
    (``claim_experiment``); yield its id; then set its status from its arms' (``settle``). Ctrl-C,
    SIGTERM or an error first ends the arms still queued (interrupted or failed) and marks the
    experiment so."""
    experiment_id: int | None = None
    with interruptible():
        try:
            with held():
                experiment_id = claim_experiment(store, arms, executor, resume, reconcile, **fields)
            yield experiment_id
        except BaseException as exc:
            if experiment_id is not None:
                status, why = ended_by(exc)
                with held():
                    end_unsubmitted(store, experiment_id, status, why)
                    settle(store, experiment_id, status, why)
            raise
        with held():
            settle(store, experiment_id)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def claim_experiment(store: Store, arms: Sequence[dict], executor: str, resume: bool,
                     reconcile: Callable[[int], None], **fields) -> int:
    """A new experiment from ``fields`` with ``arms`` queued, or (``resume``) the newest unfinished
    one planned alike: refused while its process lives on this host (``refuse_running``),
    reconciled with what still runs its arms (``reconcile(id)``), taken over by this process, its
    arms that ended short queued again; its id. Finding and creating are one transaction under
    the planning lock (SQLite's write lock, PostgreSQL's advisory lock), so that identical
    commands started together make one experiment."""
    with store.session() as session:
        if session.get_bind().dialect.name == "postgresql":
            session.execute(text(f"SELECT pg_advisory_xact_lock({_PG_PLANNING_LOCK})"))
        found = unfinished(session, arms, **fields) if resume else None
        if found is None:
            return start_experiment(session, arms, executor, **fields)
    refuse_running(found)
    reconcile(found.id)
    if not take_over(store, found):
        raise TrackerError(f"experiment e{found.id} was resumed by another process just now: follow it with "
                           f"`tracker experiments e{found.id}`")
    requeue(store, found.id, executor)
    return found.id


def start_experiment(session, arms: Sequence[dict], executor: str, **fields) -> int:
    """Create an experiment (running, in this process) from ``fields`` and its ``arms`` (label,
    comparison, baseline, spec, gpu), every arm queued for ``executor``, in ``session``; its id."""
    row = Experiment(status="running", command_line=" ".join(sys.argv), tracker_version=__version__,
                     started_at=_now(), **this_process(), **fields)
    session.add(row)
    session.flush()
    session.add_all(ExperimentArm(experiment_id=row.id, position=i, state="queued", executor=executor,
                                  attempts=1, queued_at=_now(), **arm) for i, arm in enumerate(arms))
    return row.id


def unfinished(session, arms: Sequence[dict], kind: str, network: str, network_options: dict,
               settings: dict) -> Experiment | None:
    """The newest experiment planned exactly like this one (the same kind, network, settings but
    the executor, and arms) that did not complete, to resume; None if there is none."""
    def same(settings_a: dict, settings_b: dict) -> bool:
        return ({k: v for k, v in settings_a.items() if k != "executor"}
                == {k: v for k, v in settings_b.items() if k != "executor"})

    candidates = session.scalars(select(Experiment).where(
        Experiment.kind == kind, Experiment.network == network, Experiment.status != "complete")
        .order_by(Experiment.id.desc())).all()
    for found in candidates:
        if found.network_options != network_options or not same(found.settings, settings):
            continue
        rows = session.scalars(select(ExperimentArm).where(ExperimentArm.experiment_id == found.id)
                               .order_by(ExperimentArm.position)).all()  # the same arms, on the plan's columns
        if len(rows) == len(arms) and all(getattr(row, column) == value for row, arm in zip(rows, arms)
                                          for column, value in arm.items()):
            return found
    return None


def refuse_running(experiment: Experiment) -> None:
    """Refuse to resume an experiment that another live process on this host is running (one on
    another host cannot be told alive: it may be joined, each arm claimed by one process)."""
    me = this_process()
    if experiment.status != "running" or experiment.host is None or experiment.pid is None or (
            experiment.host, experiment.pid) == (me["host"], me["pid"]):
        return
    if process_alive(experiment.host, experiment.pid, experiment.process_start):
        raise TrackerError(f"experiment e{experiment.id} is already running in pid {experiment.pid} on "
                           f"{experiment.host}: follow it with `tracker experiments e{experiment.id}`, run this "
                           "again once it ends to resume it, or give --fresh for a new experiment")


def take_over(store: Store, experiment: Experiment) -> bool:
    """Mark the experiment running in this process, if no other process took it over since
    ``experiment`` was read (its host, pid and start unchanged); whether it did."""
    with store.session() as session:
        return bool(session.execute(update(Experiment).where(
            Experiment.id == experiment.id, Experiment.host.is_not_distinct_from(experiment.host),
            Experiment.pid.is_not_distinct_from(experiment.pid),
            Experiment.process_start.is_not_distinct_from(experiment.process_start)).values(
            status="running", error=None, finished_at=None, **this_process())).rowcount)  # type: ignore[attr-defined]


def requeue(store: Store, experiment_id: int, executor: str) -> None:
    """Queue again for ``executor`` the arms that ended short (failed, interrupted): never one still
    queued or running, which its process or job still holds."""
    with store.session() as session:
        session.execute(update(ExperimentArm).where(
            ExperimentArm.experiment_id == experiment_id, ExperimentArm.state.in_(SHORT)).values(
            state="queued", executor=executor, attempts=ExperimentArm.attempts + 1, job=None, node=None, pid=None,
            process_start=None, device_name=None, run_id=None, reason=None, log_path=None, log=None,
            queued_at=_now(), started_at=None, finished_at=None))


def update_arm(store: Store, experiment_id: int, position: int, *, only_if: Sequence[str] | None = None,
               **fields) -> bool:
    """Set the arm's ``fields``; with ``only_if``, only while its state is one of those (an arm that
    ended meanwhile keeps its outcome). Whether it was set."""
    query = update(ExperimentArm).where(ExperimentArm.experiment_id == experiment_id,
                                        ExperimentArm.position == position)
    if only_if is not None:
        query = query.where(ExperimentArm.state.in_(only_if))
    with store.session() as session:
        return bool(session.execute(query.values(**fields)).rowcount)  # type: ignore[attr-defined]


def start_arm(store: Store, experiment_id: int, position: int) -> bool:
    """Mark a queued arm running in this process; False if it is not queued (ended, or taken)."""
    me = this_process()
    return update_arm(store, experiment_id, position, only_if=("queued",), state="running", node=me["host"],
                      pid=me["pid"], process_start=me["process_start"], started_at=_now())


def end_arm(store: Store, experiment_id: int, position: int, state: str, reason: str | None = None,
            log: str | None = None, *, only_if: Sequence[str] = OPEN) -> bool:
    """Mark an arm that has not ended yet as ``state`` (one of FINAL); a run it left ``running``
    (its process killed) is marked interrupted with the reason."""
    assert state in FINAL, state
    ended = update_arm(store, experiment_id, position, only_if=only_if, state=state, reason=reason,
                       finished_at=_now(), **({"log": log} if log is not None else {}))
    run_id = find_arm(store, experiment_id, position).run_id if ended and state != "complete" else None
    if run_id is not None:
        with store.session() as session:
            session.execute(update(Run).where(Run.id == run_id, Run.status == "running").values(
                status="interrupted", error=reason, finished_at=_now()))
    return ended


def end_unsubmitted(store: Store, experiment_id: int, state: str, reason: str) -> None:
    """End the arms still queued that no engine holds (no job: an arm with one is the engine's)."""
    with store.session() as session:
        session.execute(update(ExperimentArm).where(
            ExperimentArm.experiment_id == experiment_id, ExperimentArm.state == "queued",
            ExperimentArm.job.is_(None)).values(state=state, reason=reason, finished_at=_now()))


def outcome(states: Sequence[str]) -> str:
    """An experiment's status from its arms' states: running while any is queued or running, then
    failed if any failed, interrupted if any was, else complete."""
    if any(s in OPEN for s in states):
        return "running"
    for status in ("failed", "interrupted"):
        if status in states:
            return status
    return "complete"


def settle(store: Store, experiment_id: int, status: str | None = None, error: str | None = None) -> str:
    """Set the experiment's status: ``status`` if given, else from its arms' once none is queued or
    running; with ``error``, or else a line naming the arms that did not complete. The status."""
    arms = [(a, arm_state(a)) for a in arm_rows(store, experiment_id)]
    status = status or outcome([state for _, state in arms])
    if status != "running":
        unfinished_arms = [f"{a.label}: {state}" + (f" ({a.reason})" if a.reason else "")
                           for a, state in arms if state != "complete"]
        with store.session() as session:
            session.execute(update(Experiment).where(Experiment.id == experiment_id).values(
                status=status, finished_at=_now(), error=error or ("; ".join(unfinished_arms) or None)))
    return status
