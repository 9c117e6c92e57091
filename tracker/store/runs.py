"""Writing a run: its row first (status ``running``), its data in transactions, its outcome last.

``recording`` is the one way to write a run. A failure marks the run ``failed`` with the error;
Ctrl-C or SIGTERM marks it ``interrupted``; a transaction cut short rolls back, so no half-written
rows stay; earlier runs are never touched. A process killed outright (SIGKILL, power loss)
cannot mark its run: ``effective_status`` shows such a run as ``interrupted`` once its process is
gone.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

from sqlalchemy import Connection, update

from tracker import __version__
from tracker.model import Prediction
from tracker.nets import Network
from tracker.processes import this_process
from tracker.signals import held, interruptible
from tracker.store import rollups
from tracker.store.db import Store
from tracker.store.ingest import bulk_insert
from tracker.store.schema import Launch, Layer, Metric, MetricSource, Run
from tracker.store.schema import Prediction as PredictionRow


def _now() -> datetime:
    return datetime.now(UTC)


class RunWriter:
    """What a backend writes into its run; each call is one transaction."""

    def __init__(self, store: Store, run_id: int):
        self.store = store
        self.run_id = run_id

    def add_layers(self, net: Network, predictions: list[Prediction]) -> None:
        with self.store.session() as session:
            session.add_all(
                Layer(
                    run_id=self.run_id,
                    layer_id=layer.id,
                    name=layer.name,
                    kind=layer.kind,
                    attributes=layer.op.attrs(),
                    inputs=list(layer.inputs),
                    input_shapes=[list(s) for s in layer.input_shapes],
                    output_shape=list(layer.output_shape),
                    params=layer.params,
                )
                for layer in net.layers
            )
            session.flush()  # layers before the predictions that reference them
            session.add_all(
                PredictionRow(
                    run_id=self.run_id,
                    layer_id=p.layer_id,
                    phase=p.phase,
                    macs=p.macs,
                    ops=p.ops,
                    bytes=p.bytes,
                    intensity=p.intensity,
                    attainable_gflops=p.attainable_gflops,
                    predicted_ms=p.predicted_ms,
                    bound=p.bound,
                    convention=p.convention,
                )
                for p in predictions
            )

    def add_launches(self, rows: list[dict], metrics: Sequence[dict] = ()) -> None:
        """The launch log of pass 1, in invocation order, pass 2's counters on it as (invocation,
        name, value) rows, and the rollups of both: one transaction, so a run never holds half a
        join, nor counters without their rollups."""
        with self.store.begin() as conn:
            bulk_insert(conn, Launch.__table__, rows, run_id=self.run_id)
            self._counters(conn, rows, metrics, {})

    def add_counters(
        self, launches: list[dict], metrics: Sequence[dict], sources: Mapping[str, str] = {}, **fields
    ) -> None:
        """Pass 2's counters on launches already stored (``launches``: their rows, as
        ``add_launches`` was given them), the collector's name of each metric (``sources``) and the
        run fields that say how they were collected: one transaction, so a run holds all of its
        counters or none."""
        with self.store.begin() as conn:
            self._counters(conn, launches, metrics, sources, **fields)

    def _counters(
        self, conn: Connection, launches: list[dict], metrics: Sequence[dict], sources: Mapping[str, str], **fields
    ) -> None:
        """The counters, their sources, the rollups rewritten with them, and on the run ``fields``
        and counter_iterations: how many measured iterations carry counters (NULL: none)."""
        bulk_insert(conn, Metric.__table__, metrics, run_id=self.run_id)
        bulk_insert(
            conn,
            MetricSource.__table__,
            [dict(run_id=self.run_id, name=name, source=source) for name, source in sorted(sources.items())],
        )
        rollups.write(conn, self.run_id, launches, metrics)
        counted = {row["invocation"] for row in metrics}
        iterations = len({row["repeat"] for row in launches if row["invocation"] in counted})
        conn.execute(update(Run).where(Run.id == self.run_id).values(counter_iterations=iterations or None, **fields))

    def update(self, **fields) -> None:
        """Set run fields learned while running (device, versions, peak memory, ...)."""
        with self.store.session() as session:
            session.execute(update(Run).where(Run.id == self.run_id).values(**fields))


@contextmanager
def recording(store: Store, link=None, done=None, **fields) -> Iterator[RunWriter]:
    """Create a run from ``fields`` (the Run columns), yield its writer, and record how it ended.
    ``link(session, run_id)``, if given, runs in the transaction that creates the run (an
    experiment links its arm there, so that no run of it is ever left unlinked); ``done(session,
    run_id)`` in the one that marks it complete (the arm ends complete with it: never one alone)."""
    from tracker.provenance import provenance

    fields = {"command_line": " ".join(sys.argv), "tracker_version": __version__, "provenance": provenance(), **fields}
    run = Run(status="running", started_at=_now(), **this_process(), **fields)
    with marking(store, run, link, done) as run_id:
        yield RunWriter(store, run_id)


@contextmanager
def marking(store: Store, row: Run, link=None, done=None) -> Iterator[int]:
    """Insert the run ``row`` (status running; ``link(session, id)`` in the same transaction), yield
    its id, and mark it complete (``done(session, id)`` in the same transaction), failed (with the
    error) or interrupted (Ctrl-C, SIGTERM) by how the block ends. A signal at any moment leaves
    the row marked or absent: signals are held from the insert until the id is known, and while
    the row is marked."""
    row_id: int | None = None
    marked = False
    with interruptible():
        try:
            with held(), store.session() as session:
                session.add(row)
                session.flush()
                if link is not None:
                    link(session, row.id)
                row_id = row.id  # a signal held until here is raised after the commit, in this try
            yield row_id
            with held():
                _finish(store, row_id, "complete", None, done)
                marked = True
        except BaseException as exc:
            if row_id is not None and not marked:
                _finish(store, row_id, *ended_by(exc))
            raise


def ended_by(exc: BaseException) -> tuple[str, str]:
    """(status, error) of a row whose work ``exc`` ended: interrupted by Ctrl-C or SIGTERM (which
    tracker.signals raises as KeyboardInterrupt), else failed with the exception."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", "interrupted (Ctrl-C or SIGTERM)"
    return "failed", f"{type(exc).__name__}: {exc}"


def _finish(store: Store, run_id: int, status: str, error: str | None, done=None) -> None:
    """Mark the run (and call ``done`` in the same transaction); a signal arriving meanwhile waits
    for the mark, then is raised (not lost)."""
    with store.session() as session:
        session.execute(update(Run).where(Run.id == run_id).values(status=status, error=error, finished_at=_now()))
        if done is not None:
            done(session, run_id)
