"""Reading the trace store: plain rows (dicts) for the CLI, the analyses and notebooks."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select, text

from tracker.errors import StoreError
from tracker.phases import order_sql
from tracker.store.db import Store
from tracker.store.runs import effective_status
from tracker.store.schema import Base, Launch, Metric, Run
from tracker.store.views import VIEWS

if TYPE_CHECKING:
    import pandas as pd

RELATIONS = frozenset({view.name for view in VIEWS} | set(Base.metadata.tables))  # what view_frame reads

RUN_LIST_COLUMNS = ("run_id", "status", "network", "batch", "phases", "backend", "device_name",
                    "started_at", "layers", "launches", "counter_iterations", "ops", "predicted_ms", "measured_ms")


def _plain(value: Any) -> Any:
    """JSON text from SQLite views becomes lists, datetimes ISO strings, PostgreSQL's decimal sums numbers."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _rows(store: Store, sql: str, **params) -> list[dict]:
    with store.connect() as conn:
        result = conn.execute(text(sql), params)
        return [{k: _plain(_timestamp(v) if k.endswith("_at") else v) for k, v in row.items()}
                for row in result.mappings()]


def _timestamp(value: Any) -> Any:
    """SQLite hands timestamps to raw SQL as text; make them datetimes like the ORM does."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return value
    return value


def list_runs(store: Store) -> list[dict]:
    """Every run, newest last, with its effective status (dead ``running`` runs: ``interrupted``)."""
    with store.session() as session:
        runs = {run.id: effective_status(run) for run in session.scalars(select(Run))}
    rows = _rows(store, f"SELECT {', '.join(RUN_LIST_COLUMNS)} FROM run_summary ORDER BY run_id")
    for row in rows:
        row["status"] = runs[row["run_id"]]
    return rows


def find_run(store: Store, ref: str | int) -> Run:
    """A run by id, or the newest with 'last'."""
    with store.session() as session:
        if str(ref).lower() in ("last", "latest"):
            run = session.scalars(select(Run).order_by(Run.id.desc()).limit(1)).first()
            if run is None:
                raise StoreError(f"{store.where} holds no runs yet")
            return run
        run_id = row_id(ref, "run", "a number, or 'last'")
        run = session.get(Run, run_id)
        if run is None:
            raise StoreError(f"no run {run_id} in {store.where} (see `tracker runs`)")
        return run


def row_id(ref: str | int, what: str, expected: str) -> int:
    """``ref`` as a row id (databases hold 64-bit ids; a longer number is no id, not an overflow)."""
    text = str(ref).strip()
    if not (text.isascii() and text.isdigit() and 0 < len(text) <= 19 and int(text) < 2**63):
        article = "an" if what[0] in "aeiou" else "a"
        raise StoreError(f"{what} '{text[:40]}' is not {article} {what} id ({expected})")
    return int(text)


def run_dict(run: Run) -> dict:
    row = {c.name: _plain(getattr(run, c.key)) for c in Run.__table__.columns}
    row["status"] = effective_status(run)
    return row


def layer_rows(store: Store, run_id: int) -> list[dict]:
    """The layer_phase view for one run: prediction and measurement per layer and phase, with the
    median over repeats of each phase's time and its spread ((max - min) / median, in %) as the
    run's rollup holds them (layer_time)."""
    rows = _rows(store, f"SELECT * FROM layer_phase WHERE run_id = :run ORDER BY layer_id, {order_sql()}",
                 run=run_id)
    spreads = {(t["layer_id"], t["phase"]): t["spread_pct"]
               for t in _rows(store, "SELECT layer_id, phase, spread_pct FROM layer_time WHERE run_id = :run", run=run_id)}
    for row in rows:
        row["median_ms"] = row["measured_ms"]
        row["spread_pct"] = spreads.get((row["layer_id"], row["phase"]))
    return rows


def launch_rows(store: Store, run_id: int) -> list[dict]:
    with store.session() as session:
        launches = session.scalars(select(Launch).where(Launch.run_id == run_id).order_by(Launch.invocation))
        return [{c.name: getattr(k, c.key) for c in Launch.__table__.columns} for k in launches]


def launch_count(store: Store, run_id: int) -> int:
    """How many launches the run holds (pass 1's, every measured iteration)."""
    with store.session() as session:
        return session.scalar(select(func.count()).select_from(Launch).where(Launch.run_id == run_id)) or 0


def metric_rows(store: Store, run_id: int) -> list[dict]:
    with store.session() as session:
        metrics = session.scalars(select(Metric).where(Metric.run_id == run_id)
                                  .order_by(Metric.invocation, Metric.name))
        return [{"invocation": m.invocation, "name": m.name, "value": m.value} for m in metrics]


def view_frame(store: Store, name: str, run_id: int | None = None) -> pd.DataFrame:
    """A view or table of the store as a DataFrame, for one run or all. ``name`` is SQL, so only
    the store's own relations are read."""
    import pandas as pd

    if name not in RELATIONS:
        from tracker.errors import unknown

        raise unknown("view or table", name, sorted(RELATIONS))
    where = "" if run_id is None else " WHERE run_id = :run"
    with store.connect() as conn:
        return pd.read_sql(text(f"SELECT * FROM {name}{where}"), conn, params={"run": run_id})


_EXPERIMENT_RUNS = (
    "SELECT e.experiment_id, e.position, e.arm, e.comparison, e.baseline, r.id AS run_id, r.status, "
    "r.batch, r.l1_bypass, r.loaders, r.variants, r.backend, r.device_name, a.gpu FROM experiment_run e "
    "JOIN run r ON r.id = e.run_id LEFT JOIN experiment_arm a ON a.experiment_id = e.experiment_id "
    "AND a.position = e.position WHERE e.experiment_id = :e AND (a.position IS NULL OR a.run_id = e.run_id) "
    "ORDER BY e.position, r.id")


def experiment_runs(store: Store, experiment_id: int) -> pd.DataFrame:
    """An experiment's runs in the order of its arms, each arm's one run (``experiment_arm.run_id``,
    its latest attempt's: an earlier attempt's run is linked but never counted; before schema v8 an
    experiment has no arms, and every linked run is its own arm's): arm, comparison, baseline, the
    GPU kind it asked for (a sweep over --gpus), and run settings."""
    import pandas as pd

    with store.connect() as conn:
        return pd.read_sql(text(_EXPERIMENT_RUNS), conn, params={"e": experiment_id})


def experiment_arm_runs(store: Store, experiment_id: int) -> list[tuple[str, int]]:
    """(arm, run id) of ``experiment_runs``' rows, read without pandas (``tracker experiments``
    lists them, and a listing should start fast)."""
    with store.connect() as conn:
        return [(row.arm, row.run_id) for row in conn.execute(text(_EXPERIMENT_RUNS), {"e": experiment_id})]


def latest_library_run(store: Store, network: str, batch: int, device_name: str | None) -> int | None:
    """The newest complete measured run of ``network`` at ``batch`` on ``device_name`` that a
    library ran (``--impl torch``), or None."""
    with store.session() as session:
        return session.scalar(select(Run.id).where(
            Run.network == network, Run.batch == batch, Run.device_name == device_name, Run.status == "complete",
            Run.implementation != "ours", Run.backend != "model").order_by(Run.id.desc()).limit(1))
