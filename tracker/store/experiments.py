"""Writing and finding experiments: an ``experiment`` row first (status running) with its planned
arms (queued), each arm's run linked as it is created, each arm's outcome as it ends, and the
experiment's outcome from its arms' (``settle``). Re-running an unfinished experiment finds it
(``planned_alike``) and queues its arms that did not complete.

Each arm runs once and counts once: one process at a time finds, makes or takes over an
experiment, in one transaction (the planning lock), so identical commands started together make
one, and the others are refused while its process lives or once it is complete; an arm is
claimed by a conditional update from queued (``start_arm``), only an arm that ended short is
queued again (``requeue``), and a run is marked complete in the transaction that completes its
arm (``complete_arm``). An arm's one run is ``experiment_arm.run_id``;
``experiment_run`` keeps every attempt's."""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

from sqlalchemy import or_, select, text, update

from tracker import __version__
from tracker.errors import TrackerError
from tracker.processes import process_alive, this_process
from tracker.signals import held, interruptible
from tracker.store.db import Store
from tracker.store.queries import arm_rows, find_arm
from tracker.store.runs import ended_by
from tracker.store.schema import Experiment, ExperimentArm, ExperimentRun, Run
from tracker.store.states import FINAL, OPEN, SHORT, arm_state

LOG_LINES = 40  # the last lines of an arm's output kept in its row
_PG_PLANNING_LOCK = 72532  # advisory lock space: one process at a time finds or makes an experiment


def link_arm(session, experiment_id: int, position: int, run_id: int) -> None:
    """Link an arm's run to the experiment in ``session``: the transaction that creates the run, so
    that no run of the experiment, interrupted or not, is ever left unlinked."""
    arm = session.get(ExperimentArm, (experiment_id, position))
    session.add(
        ExperimentRun(
            experiment_id=experiment_id,
            run_id=run_id,
            position=position,
            arm=arm.label,
            comparison=arm.comparison,
            baseline=arm.baseline,
        )
    )
    arm.run_id = run_id


def complete_arm(session, experiment_id: int, position: int, run_id: int, log: str) -> None:
    """Mark the arm complete with its run in ``session``: the transaction that marks the run
    complete, so that a signal or a kill between the two cannot leave a complete run behind an
    arm that a resume would run again. Only while the arm still runs this run."""
    device = select(Run.device_name).where(Run.id == run_id).scalar_subquery()
    session.execute(
        update(ExperimentArm)
        .where(
            ExperimentArm.experiment_id == experiment_id,
            ExperimentArm.position == position,
            ExperimentArm.state == "running",
            ExperimentArm.run_id == run_id,
        )
        .values(state="complete", reason=None, finished_at=_now(), log=log, device_name=device)
    )


@contextmanager
def recording_experiment(
    store: Store,
    arms: Sequence[dict],
    executor: str,
    *,
    resume: bool = False,
    reconcile: Callable[[int], None] = lambda experiment_id: None,
    since: datetime | None = None,
    **fields,
) -> Iterator[int]:
    """Create an experiment from ``fields`` (kind, network, network_options, settings) with its
    ``arms`` queued for ``executor``, or take over the one planned alike by a command started with
    this one (at ``since``) or, with ``resume``, an unfinished one (``claim_experiment``); yield its
    id; then set its status from its arms' (``settle``). Ctrl-C, SIGTERM or an error first ends the
    arms still queued (interrupted or failed) and marks the experiment so."""
    experiment_id: int | None = None
    with interruptible():
        try:
            with held():
                experiment_id = claim_experiment(store, arms, executor, resume, reconcile, since, **fields)
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
    return datetime.now(UTC)


def claim_experiment(
    store: Store,
    arms: Sequence[dict],
    executor: str,
    resume: bool,
    reconcile: Callable[[int], None],
    since: datetime | None = None,
    **fields,
) -> int:
    """This command's experiment, its id. Found or made in one transaction under the planning lock
    (``hold_planning_lock``), so that identical commands started together make one however fast
    the first runs it: the newest planned alike (``planned_alike``) that such a command started or
    finished after this one started (``since``, default now), or with ``resume`` one that did not
    complete; else a new one from ``fields`` with ``arms`` queued. One found is refused while its
    process lives on this host, or when a twin has completed it (``refuse_taken``); else this
    process takes it over, reconciles it with what still runs its arms (``reconcile(id)``) and
    queues again its arms that ended short."""
    since = since or _now()
    with store.session() as session:
        hold_planning_lock(session, fields["kind"], fields["network"])
        found = planned_alike(session, arms, since, resume, **fields)
        if found is None:
            return start_experiment(session, arms, executor, **fields)
        refuse_taken(found)
        take_over(session, found)
    reconcile(found.id)
    requeue(store, found.id, executor)
    return found.id


def hold_planning_lock(session, kind: str, network: str) -> None:
    """Hold, to the end of ``session``'s transaction, the lock under which experiments of ``kind``
    on ``network`` are found or made: on SQLite the transaction's own write lock (BEGIN IMMEDIATE,
    tracker/store/db.py), on PostgreSQL an advisory lock keyed on the two."""
    if session.get_bind().dialect.name == "postgresql":
        key = zlib.crc32(f"{kind}\0{network}".encode()) - 2**31  # the lock's second int4
        session.execute(text("SELECT pg_advisory_xact_lock(:space, :key)"), {"space": _PG_PLANNING_LOCK, "key": key})


def start_experiment(session, arms: Sequence[dict], executor: str, **fields) -> int:
    """Create an experiment (running, in this process) from ``fields`` and its ``arms`` (label,
    comparison, baseline, spec, gpu), every arm queued for ``executor``, in ``session``; its id."""
    row = Experiment(
        status="running",
        command_line=" ".join(sys.argv),
        tracker_version=__version__,
        started_at=_now(),
        **this_process(),
        **fields,
    )
    session.add(row)
    session.flush()
    session.add_all(
        ExperimentArm(
            experiment_id=row.id, position=i, state="queued", executor=executor, attempts=1, queued_at=_now(), **arm
        )
        for i, arm in enumerate(arms)
    )
    return row.id


def planned_alike(
    session,
    arms: Sequence[dict],
    since: datetime,
    resume: bool,
    kind: str,
    network: str,
    network_options: dict,
    settings: dict,
) -> Experiment | None:
    """The newest experiment planned exactly like this one (the same kind, network, settings but
    the executor, and arms) that is this command's: one a command started together with it began
    or finished after ``since``; with ``resume`` also an older one that did not complete. None if
    there is none: a complete one that finished before ``since`` is a past answer, not this one."""

    def same(settings_a: dict, settings_b: dict) -> bool:
        return {k: v for k, v in settings_a.items() if k != "executor"} == {
            k: v for k, v in settings_b.items() if k != "executor"
        }

    this_commands = or_(Experiment.started_at >= since, Experiment.finished_at >= since)
    candidates = session.scalars(
        select(Experiment)
        .where(
            Experiment.kind == kind,
            Experiment.network == network,
            or_(this_commands, Experiment.status != "complete") if resume else this_commands,
        )
        .order_by(Experiment.id.desc())
    ).all()
    for found in candidates:
        if found.network_options != network_options or not same(found.settings, settings):
            continue
        rows = session.scalars(
            select(ExperimentArm).where(ExperimentArm.experiment_id == found.id).order_by(ExperimentArm.position)
        ).all()  # the same arms, on the plan's columns
        if len(rows) == len(arms) and all(
            getattr(row, column) == value for row, arm in zip(rows, arms) for column, value in arm.items()
        ):
            return found
    return None


def refuse_taken(experiment: Experiment) -> None:
    """Refuse an experiment that a command started together with this one completed, and one
    that another live process on this host is running (``refuse_running``)."""
    if experiment.status == "complete":
        raise TrackerError(
            f"experiment e{experiment.id} is complete: the same command, started with this one, "
            f"ran it (`tracker report e{experiment.id}`); run this again for a new experiment"
        )
    refuse_running(experiment)


def refuse_running(experiment: Experiment) -> None:
    """Refuse to resume an experiment that another live process on this host is running (one on
    another host cannot be told alive: it may be joined, each arm claimed by one process)."""
    me = this_process()
    if (
        experiment.status != "running"
        or experiment.host is None
        or experiment.pid is None
        or (experiment.host, experiment.pid) == (me["host"], me["pid"])
    ):
        return
    if process_alive(experiment.host, experiment.pid, experiment.process_start):
        raise TrackerError(
            f"experiment e{experiment.id} is already running in pid {experiment.pid} on "
            f"{experiment.host}: follow it with `tracker experiments e{experiment.id}`, run this "
            "again once it ends to resume it, or give --fresh for a new experiment"
        )


def take_over(session, experiment: Experiment) -> None:
    """Mark the experiment running in this process, in ``session`` (the planning lock's transaction:
    no other process takes it over between the reading and the writing)."""
    experiment.status, experiment.error, experiment.finished_at = "running", None, None
    for column, value in this_process().items():
        setattr(experiment, column, value)


def requeue(store: Store, experiment_id: int, executor: str) -> None:
    """Queue again for ``executor`` the arms that ended short (failed, interrupted): never one still
    queued or running, which its process or job still holds."""
    with store.session() as session:
        session.execute(
            update(ExperimentArm)
            .where(ExperimentArm.experiment_id == experiment_id, ExperimentArm.state.in_(SHORT))
            .values(
                state="queued",
                executor=executor,
                attempts=ExperimentArm.attempts + 1,
                job=None,
                node=None,
                pid=None,
                process_start=None,
                device_name=None,
                run_id=None,
                reason=None,
                log_path=None,
                log=None,
                queued_at=_now(),
                started_at=None,
                finished_at=None,
            )
        )


def update_arm(
    store: Store, experiment_id: int, position: int, *, only_if: Sequence[str] | None = None, **fields
) -> bool:
    """Set the arm's ``fields``; with ``only_if``, only while its state is one of those (an arm that
    ended meanwhile keeps its outcome). Whether it was set."""
    query = update(ExperimentArm).where(
        ExperimentArm.experiment_id == experiment_id, ExperimentArm.position == position
    )
    if only_if is not None:
        query = query.where(ExperimentArm.state.in_(only_if))
    with store.session() as session:
        return bool(session.execute(query.values(**fields)).rowcount)  # type: ignore[attr-defined]


def start_arm(store: Store, experiment_id: int, position: int) -> bool:
    """Mark a queued arm running in this process; False if it is not queued (ended, or taken)."""
    me = this_process()
    return update_arm(
        store,
        experiment_id,
        position,
        only_if=("queued",),
        state="running",
        node=me["host"],
        pid=me["pid"],
        process_start=me["process_start"],
        started_at=_now(),
    )


def end_arm(
    store: Store,
    experiment_id: int,
    position: int,
    state: str,
    reason: str | None = None,
    log: str | None = None,
    *,
    only_if: Sequence[str] = OPEN,
) -> bool:
    """Mark an arm that has not ended yet as ``state`` (one of FINAL); a run it left ``running``
    (its process killed) is marked interrupted with the reason."""
    assert state in FINAL, state
    ended = update_arm(
        store,
        experiment_id,
        position,
        only_if=only_if,
        state=state,
        reason=reason,
        finished_at=_now(),
        **({"log": log} if log is not None else {}),
    )
    run_id = find_arm(store, experiment_id, position).run_id if ended and state != "complete" else None
    if run_id is not None:
        with store.session() as session:
            session.execute(
                update(Run)
                .where(Run.id == run_id, Run.status == "running")
                .values(status="interrupted", error=reason, finished_at=_now())
            )
    return ended


def end_unsubmitted(store: Store, experiment_id: int, state: str, reason: str) -> None:
    """End the arms still queued that no engine holds (no job: an arm with one is the engine's)."""
    with store.session() as session:
        session.execute(
            update(ExperimentArm)
            .where(
                ExperimentArm.experiment_id == experiment_id,
                ExperimentArm.state == "queued",
                ExperimentArm.job.is_(None),
            )
            .values(state=state, reason=reason, finished_at=_now())
        )


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
        unfinished_arms = [
            f"{a.label}: {state}" + (f" ({a.reason})" if a.reason else "") for a, state in arms if state != "complete"
        ]
        with store.session() as session:
            session.execute(
                update(Experiment)
                .where(Experiment.id == experiment_id)
                .values(status=status, finished_at=_now(), error=error or ("; ".join(unfinished_arms) or None))
            )
    return status
