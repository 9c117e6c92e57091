"""Reading the trace store: plain rows (dicts) for the CLI, the analyses and notebooks, and records
of runs, experiments and their arms (a row's columns as attributes). Plain SQL through
``Store.rows``, so that a read command (``runs``, ``show``, ``experiments``) imports no SQLAlchemy;
only the pandas readers go through its engine."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from tracker.errors import MAX_DIGITS, StoreError, is_digits
from tracker.phases import order_sql
from tracker.store.db import Store
from tracker.store.states import OPEN, arm_state, effective_status

if TYPE_CHECKING:
    import pandas as pd

RUN_LIST_COLUMNS = (
    "run_id",
    "status",
    "network",
    "batch",
    "phases",
    "backend",
    "device_name",
    "started_at",
    "layers",
    "launches",
    "counter_iterations",
    "ops",
    "predicted_ms",
    "measured_ms",
)


def relations() -> frozenset[str]:
    """The store's own tables and views: what ``view_frame`` may read."""
    from tracker.store.schema import Base
    from tracker.store.views import VIEWS

    return frozenset({view.name for view in VIEWS} | set(Base.metadata.tables))


def why_empty(store: Store, statement: str) -> str | None:
    """Why a query that returned no rows could return none, or None where the store does not say:
    it reads counters or measurements (a relation named in ``statement``) and every run it asks for
    (``run_id = N`` or ``run_id IN (...)``, else every run) stored none, being a model run or a run
    without a counter collector. Decided from the names in the statement and the run table alone:
    the statement itself is never run again."""
    from tracker.store.views import COUNTERS, MEASUREMENTS

    words = {word.lower() for word in re.findall(r"\w+", statement)}
    named = next((name for name in (*COUNTERS, *MEASUREMENTS) if name in words), None)
    if named is None:
        return None
    holds = "counters" if named in COUNTERS else "measurements"
    asked = _run_ids(statement)
    runs = [
        run
        for run in _records(store, "SELECT id, backend, counter_iterations FROM run ORDER BY id")
        if asked is None or run.id in asked
    ]
    if not runs:
        which = "" if asked is None else f"{'s' if len(asked) > 1 else ''} {', '.join(map(str, sorted(asked)))}"
        return f"{named} holds {holds}, and the store holds no run{which}"
    lacking = {run.id: _lacks(run, holds) for run in runs}
    if not all(lacking.values()):
        return None
    by_lack: dict[str, list[int]] = {}
    for run_id, lack in lacking.items():
        by_lack.setdefault(str(lack), []).append(run_id)
    return f"{named} holds {holds}, and " + "; ".join(_lacking(ids, lack) for lack, ids in by_lack.items())


def _run_ids(statement: str) -> set[int] | None:
    """The runs a statement filters on (``run_id = 3``, ``run_id IN (3, 4)``), None where it names none."""
    found = re.findall(r"\brun_id\s*(?:=\s*(\d+)|in\s*\(([\d\s,]+)\))", statement, re.IGNORECASE)
    ids = {int(n) for one, many in found for n in (one, *many.split(",")) if n.strip()}
    return ids or None


def _lacks(run: SimpleNamespace, holds: str) -> str | None:
    """'model' where a run measured nothing, its backend where it collected no counters and
    ``holds`` is counters; None where it has what ``holds`` names."""
    if run.backend == "model":
        return "model"
    if holds == "counters" and run.counter_iterations is None:
        return str(run.backend)
    return None


def _lacking(ids: list[int], lack: str) -> str:
    """'run 1 is a model run: nothing was measured', 'runs 3, 4 ran the events backend: ...'."""
    runs = f"run {ids[0]}" if len(ids) == 1 else f"runs {', '.join(map(str, ids))}"
    if lack == "model":
        return f"{runs} {'is a model run' if len(ids) == 1 else 'are model runs'}: nothing was measured"
    return f"{runs} ran the {lack} backend: no counters were collected"


# The longest JSON text made into lists: decoded, JSON takes up to about 20 times its length in
# memory ('[],' is a 64-byte list), and the store's own JSON values are kilobytes.
JSON_DECODED_CHARS = 1 << 20


def plain(value: Any) -> Any:
    """JSON text from SQLite views becomes lists (up to ``JSON_DECODED_CHARS``: longer stays text),
    datetimes ISO strings, PostgreSQL's decimal sums numbers."""
    if isinstance(value, Decimal):
        return _number(value)
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, str) and value[:1] in ("[", "{") and len(value) <= JSON_DECODED_CHARS:
        try:
            return json.loads(value)
        except (ValueError, RecursionError):  # not JSON, or nested beyond Python's stack
            return value
    return value


_FLOAT_MAX = Decimal(sys.float_info.max)


def _number(value: Decimal) -> int | float | str:
    """A decimal as the number it is: an int where whole, else a float; past a float's range, its
    digits as text (Python neither converts such an int to a float nor prints one of over 4,300
    digits)."""
    if value.is_finite() and abs(value) > _FLOAT_MAX:
        return str(value)
    return int(value) if value.is_finite() and value == value.to_integral_value() else float(value)


def _rows(store: Store, sql: str, **params) -> list[dict]:
    return [
        {k: plain(_timestamp(v) if k.endswith("_at") else v) for k, v in row.items()}
        for row in store.rows(sql, **params)
    ]


def _records(store: Store, sql: str, **params) -> list[SimpleNamespace]:
    """Rows as records: each column an attribute, decoded as the schema declares it."""
    return [SimpleNamespace(**row) for row in store.rows(sql, **params)]


def _find(store: Store, table: str, ref: str | int, what: str, expected: str, listing: str) -> SimpleNamespace:
    """The row of ``table`` whose id ``ref`` names, or its newest with 'last'."""
    if str(ref).lower() in ("last", "latest"):
        found = _records(store, f"SELECT * FROM {table} ORDER BY id DESC LIMIT 1")
        if not found:
            raise StoreError(f"{store.where} holds no {what}s yet")
        return found[0]
    key = row_id(ref, what, expected)
    found = _records(store, f"SELECT * FROM {table} WHERE id = :id", id=key)
    if not found:
        raise StoreError(f"no {what} {key} in {store.where} (see `{listing}`)")
    return found[0]


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
    runs = {
        run.id: effective_status(run) for run in _records(store, "SELECT id, status, host, pid, process_start FROM run")
    }
    rows = _rows(store, f"SELECT {', '.join(RUN_LIST_COLUMNS)} FROM run_summary ORDER BY run_id")
    for row in rows:
        row["status"] = runs[row["run_id"]]
    return rows


def find_run(store: Store, ref: str | int) -> SimpleNamespace:
    """A run's record by id, or the newest with 'last'."""
    return _find(store, "run", ref, "run", "a number, or 'last'", "tracker runs")


def row_id(ref: str | int, what: str, expected: str) -> int:
    """``ref`` as a row id (databases hold 64-bit ids; a longer number is no id, not an overflow)."""
    text = str(ref)
    if not (is_digits(text) and 0 < len(text) <= MAX_DIGITS and int(text) < 2**63):
        article = "an" if what[0] in "aeiou" else "a"
        raise StoreError(f"{what} '{text[:40]}' is not {article} {what} id ({expected})")
    return int(text)


def run_dict(run: SimpleNamespace) -> dict:
    """A run's columns as plain values (JSON as lists and dicts, datetimes as ISO strings), its status
    the effective one."""
    return {key: plain(value) for key, value in vars(run).items()} | {"status": effective_status(run)}


def layer_rows(store: Store, run_id: int) -> list[dict]:
    """The layer_phase view for one run: prediction and measurement per layer and phase, with the
    median over repeats of each phase's time and its spread ((max - min) / median, in %) as the
    run's rollup holds them (layer_time), and the GPU idle before its launches (idle_ms, where the
    run's launches have starts: ``idle_per_phase``)."""
    rows = _rows(store, f"SELECT * FROM layer_phase WHERE run_id = :run ORDER BY layer_id, {order_sql()}", run=run_id)
    spreads = {
        (t["layer_id"], t["phase"]): t["spread_pct"]
        for t in _rows(store, "SELECT layer_id, phase, spread_pct FROM layer_time WHERE run_id = :run", run=run_id)
    }
    idle = {(r["layer_id"], r["phase"]): r["idle_ms"] for r in idle_per_phase(store, run_id)}
    for row in rows:
        row["median_ms"] = row["measured_ms"]
        row["spread_pct"] = spreads.get((row["layer_id"], row["phase"]))
        row["idle_ms"] = idle.get((row["layer_id"], row["phase"]))
    return rows


def idle_per_phase(store: Store, run_id: int) -> list[dict]:
    """Per layer phase of a run whose launches have starts (layer_idle): the medians over measured
    iterations of idle_ms (the GPU idle before its launches) and busy_ms, in layer and phase order;
    none for a run without starts."""
    from tracker.stats import over_repeats

    grouped: dict[tuple, list[dict]] = {}
    for row in _rows(store, "SELECT * FROM layer_idle WHERE run_id = :run", run=run_id):
        grouped.setdefault((row["layer_id"], row["layer"], row["kind"], row["phase"]), []).append(row)
    found = []
    for (layer_id, layer, kind, phase), rows in grouped.items():
        idle, busy = (over_repeats(r[column] for r in rows) for column in ("idle_ms", "busy_ms"))
        found.append(
            dict(
                layer_id=layer_id,
                layer=layer,
                kind=kind,
                phase=phase,
                idle_ms=idle and idle.median,
                busy_ms=busy and busy.median,
            )
        )
    return found


def idle_per_iteration(store: Store, run_id: int) -> dict | None:
    """The medians over measured iterations of span_ms, idle_ms and idle_pct (iteration_idle), and
    how many iterations; None for a run whose launches have no starts."""
    from tracker.stats import over_repeats

    rows = _rows(store, "SELECT span_ms, idle_ms, idle_pct FROM iteration_idle WHERE run_id = :run", run=run_id)
    if not rows:
        return None
    medians = {c: (stats.median if (stats := over_repeats(r[c] for r in rows)) else None) for c in rows[0]}
    return medians | {"iterations": len(rows)}


def idle_line(store: Store, run_id: int) -> str | None:
    """'1.96 ms of 27.2 ms (7.2%) between launches in each iteration, median of 3': `tracker show`'s
    gpu_idle line and the report's finding; None for a run whose launches have no starts."""
    from tracker import units

    found = idle_per_iteration(store, run_id)
    if found is None or found["span_ms"] is None:
        return None
    return (
        f"{units.milliseconds(found['idle_ms'])} of {units.milliseconds(found['span_ms'])} "
        f"({units.percent(found['idle_pct'] or 0)}) between launches in each iteration, "
        f"median of {found['iterations']}"
    )


def run_summaries(store: Store) -> list[dict]:
    """Every run's run_summary row, oldest first."""
    return _rows(store, "SELECT * FROM run_summary ORDER BY run_id")


def experiment_rows(store: Store) -> list[dict]:
    """Every experiment's row, oldest first."""
    return _rows(store, "SELECT * FROM experiment ORDER BY id")


def view_rows(store: Store, name: str, run_id: int) -> list[dict]:
    """One run's rows of a view of the store (``name`` is checked against the store's relations)."""
    if name not in relations():
        from tracker.errors import unknown

        raise unknown("view or table", name, sorted(relations()))
    return _rows(store, f"SELECT * FROM {name} WHERE run_id = :run", run=run_id)


def phase_launches(store: Store, run_id: int, layer: str, phase: str) -> list[dict] | None:
    """A layer phase's launches with every counter (launch_metrics), in invocation order; None where
    the run has no layer of that name."""
    found = _rows(store, "SELECT layer_id FROM layer WHERE run_id = :run AND name = :name", run=run_id, name=layer)
    if not found:
        return None
    return _rows(
        store,
        "SELECT * FROM launch_metrics WHERE run_id = :run AND layer_id = :layer AND phase = :phase ORDER BY invocation",
        run=run_id,
        layer=found[0]["layer_id"],
        phase=phase,
    )


def complete_runs(store: Store, network: str, batch: int, implementation: str | None = None) -> list[dict]:
    """The complete runs of ``network`` at ``batch`` (by ``implementation``), oldest first."""
    sql = "SELECT * FROM run WHERE status = 'complete' AND network = :network AND batch = :batch"
    if implementation is not None:
        sql += " AND implementation = :implementation"
    rows = _rows(store, sql + " ORDER BY started_at, id", network=network, batch=batch, implementation=implementation)
    return rows


def finished_at(store: Store, run_id: int) -> str | None:
    """When a complete run ended; None for a run not complete, or not there."""
    rows = _rows(store, "SELECT status, finished_at FROM run WHERE id = :run", run=run_id)
    return str(rows[0]["finished_at"]) if rows and rows[0]["status"] == "complete" else None


def store_mark(store: Store) -> tuple:
    """What changes whenever a run is added, ends or goes: (runs, the newest id, the latest end)."""
    row = _rows(store, "SELECT COUNT(*) AS n, MAX(id) AS newest, MAX(finished_at) AS ended FROM run")[0]
    return (row["n"], row["newest"], str(row["ended"]))


def launch_rows(store: Store, run_id: int) -> list[dict]:
    return store.rows("SELECT * FROM launch WHERE run_id = :run ORDER BY invocation", run=run_id)


def launch_count(store: Store, run_id: int) -> int:
    """How many launches the run holds (pass 1's, every measured iteration)."""
    return store.rows("SELECT COUNT(*) AS n FROM launch WHERE run_id = :run", run=run_id)[0]["n"]


def metric_rows(store: Store, run_id: int) -> list[dict]:
    return store.rows(
        "SELECT invocation, name, value FROM metric WHERE run_id = :run ORDER BY invocation, name", run=run_id
    )


def view_frame(store: Store, name: str, run_id: int | None = None) -> pd.DataFrame:
    """A view or table of the store as a DataFrame, for one run or all. ``name`` is SQL, so only
    the store's own relations are read."""
    import pandas as pd
    from sqlalchemy import text

    if name not in relations():
        from tracker.errors import unknown

        raise unknown("view or table", name, sorted(relations()))
    frames = store.frames
    end = finished_at(store, run_id) if frames is not None and run_id is not None else None
    if frames is not None and end is not None and (name, run_id, end) in frames:
        return frames[name, run_id, end].copy()
    where = "" if run_id is None else " WHERE run_id = :run"
    with store.connect() as conn:
        frame = pd.read_sql(text(f"SELECT * FROM {name}{where}"), conn, params={"run": run_id})
    if frames is not None and end is not None:  # a complete run's rows never change: kept
        if len(frames) >= FRAMES_KEPT:
            frames.clear()
        frames[name, run_id, end] = frame.copy()
    return frame


FRAMES_KEPT = 4096  # view frames a long-lived reader keeps (tens of KB each)


_EXPERIMENT_RUNS = (
    "SELECT e.experiment_id, e.position, e.arm, e.comparison, e.baseline, r.id AS run_id, r.status, "
    "r.batch, r.l1_bypass, r.loaders, r.variants, r.backend, r.device_name, a.gpu FROM experiment_run e "
    "JOIN run r ON r.id = e.run_id LEFT JOIN experiment_arm a ON a.experiment_id = e.experiment_id "
    "AND a.position = e.position WHERE e.experiment_id = :e AND (a.position IS NULL OR a.run_id = e.run_id) "
    "ORDER BY e.position, r.id"
)


def experiment_runs(store: Store, experiment_id: int) -> pd.DataFrame:
    """An experiment's runs in the order of its arms, each arm's one run (``experiment_arm.run_id``,
    its latest attempt's: an earlier attempt's run is linked but never counted; before schema v8 an
    experiment has no arms, and every linked run is its own arm's): arm, comparison, baseline, the
    GPU kind it asked for (a sweep over --gpus), and run settings."""
    import pandas as pd
    from sqlalchemy import text

    with store.connect() as conn:
        return pd.read_sql(text(_EXPERIMENT_RUNS), conn, params={"e": experiment_id})


def experiment_arm_runs(store: Store, experiment_id: int) -> list[tuple[str, int]]:
    """(arm, run id) of ``experiment_runs``' rows, read without pandas (``tracker experiments``
    lists them, and a listing should start fast)."""
    return [(row["arm"], row["run_id"]) for row in store.rows(_EXPERIMENT_RUNS, e=experiment_id)]


def latest_library_run(
    store: Store, network: str, batch: int, device_name: str | None, cudnn_benchmark: bool = False
) -> int | None:
    """The newest complete measured run of ``network`` at ``batch`` on ``device_name`` that a
    library ran (``--impl torch``), with cuDNN's heuristic or (``cudnn_benchmark``) its fastest, or None."""
    device = "device_name IS NULL" if device_name is None else "device_name = :device"
    found = store.rows(
        f"SELECT id, library FROM run WHERE network = :network AND batch = :batch AND {device} "
        "AND status = 'complete' AND implementation <> 'ours' AND backend <> 'model' "
        "ORDER BY id DESC",
        network=network,
        batch=batch,
        device=device_name,
    )
    return next(
        (row["id"] for row in found if bool((row["library"] or {}).get("cudnn_benchmark")) == cudnn_benchmark), None
    )


# Experiments


def find_experiment(store: Store, ref: str | int) -> SimpleNamespace:
    """An experiment's record by id ('2' or 'e2'), or the newest with 'last'."""
    text = str(ref).lower()
    return _find(
        store,
        "experiment",
        text if text in ("last", "latest") else text.removeprefix("e"),
        "experiment",
        "e.g. e2, or 'last'",
        "tracker experiments",
    )


def is_experiment_ref(ref: str) -> bool:
    """Whether a command's RUN names an experiment ('e2') rather than a run ('2', 'last')."""
    return ref.lower().startswith("e") and ref.lower() not in ("last", "latest")


def experiment_ids(store: Store) -> list[int]:
    """Every experiment's id, oldest first."""
    return [row["id"] for row in store.rows("SELECT id FROM experiment ORDER BY id")]


def experiment_dict(experiment: SimpleNamespace, arms: Sequence[SimpleNamespace] = ()) -> dict:
    """Its columns; the status as ``effective_status`` says (a killed experiment is interrupted),
    except that arms still held by a cluster's jobs keep it running (they outlive the process that
    submitted them)."""
    status = effective_status(experiment)
    if experiment.status == "running" and any(a.job is not None and arm_state(a) in OPEN for a in arms):
        status = "running"
    return vars(experiment) | {"status": status}


def arm_rows(store: Store, experiment_id: int) -> list[SimpleNamespace]:
    """The experiment's planned arms in order (none for an experiment recorded before schema v8)."""
    return _records(store, "SELECT * FROM experiment_arm WHERE experiment_id = :e ORDER BY position", e=experiment_id)


def find_arm(store: Store, experiment_id: int, position: int) -> SimpleNamespace:
    found = _records(
        store, "SELECT * FROM experiment_arm WHERE experiment_id = :e AND position = :p", e=experiment_id, p=position
    )
    if not found:
        raise StoreError(f"experiment {experiment_id} has no arm {position} in {store.where}")
    return found[0]
