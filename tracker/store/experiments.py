"""Writing and finding experiments: an ``experiment`` row first (status running), each run linked
as it completes, the outcome last (as for a run: failed, interrupted or complete)."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Iterator

from sqlalchemy import select

from tracker import __version__
from tracker.errors import StoreError
from tracker.store.db import Store
from tracker.store.queries import row_id
from tracker.store.runs import effective_status, marking, this_process
from tracker.store.schema import Experiment, ExperimentRun


class ExperimentWriter:
    def __init__(self, store: Store, experiment_id: int):
        self.store = store
        self.experiment_id = experiment_id
        self.position = 0

    def link(self, session, run_id: int, arm: str, comparison: str, baseline: bool) -> None:
        """Link a run to the experiment in ``session``: the transaction that creates the run, so
        that no run of the experiment, interrupted or not, is ever left unlinked."""
        session.add(ExperimentRun(experiment_id=self.experiment_id, run_id=run_id, position=self.position,
                                  arm=arm, comparison=comparison, baseline=baseline))
        self.position += 1


@contextmanager
def recording_experiment(store: Store, **fields) -> Iterator[ExperimentWriter]:
    """Create an experiment from ``fields`` (kind, network, network_options, settings), yield its
    writer, and record how it ended."""
    row = Experiment(status="running", command_line=" ".join(sys.argv), tracker_version=__version__,
                     started_at=datetime.now(timezone.utc), **this_process(), **fields)
    with marking(store, row) as experiment_id:
        yield ExperimentWriter(store, experiment_id)


def find_experiment(store: Store, ref: str | int) -> Experiment:
    """An experiment by id ('2' or 'e2'), or the newest with 'last'."""
    with store.session() as session:
        if str(ref).lower() in ("last", "latest"):
            found = session.scalars(select(Experiment).order_by(Experiment.id.desc()).limit(1)).first()
            if found is None:
                raise StoreError(f"{store.where} holds no experiments yet")
            return found
        experiment_id = row_id(str(ref).lower().removeprefix("e"), "experiment", "e.g. e2, or 'last'")
        found = session.get(Experiment, experiment_id)
        if found is None:
            raise StoreError(f"no experiment {experiment_id} in {store.where} (see `tracker experiments`)")
        return found


def experiment_ids(store: Store) -> list[int]:
    """Every experiment's id, oldest first."""
    with store.session() as session:
        return list(session.scalars(select(Experiment.id).order_by(Experiment.id)))


def experiment_dict(experiment: Experiment) -> dict:
    """Its columns; the status as ``effective_status`` says (a killed experiment is interrupted)."""
    return {c.name: getattr(experiment, c.key) for c in Experiment.__table__.columns} | {
        "status": effective_status(experiment)}
