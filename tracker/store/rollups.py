"""Per-run rollups: a run's times and counters summarised over its launches and its measured
iterations, written in the same transaction as the launches and counters themselves.

A view that aggregates over the whole store (medians by window functions, pivots by GROUP BY)
costs what the whole store costs, whatever ``WHERE run_id = ?`` says: neither SQLite nor
PostgreSQL pushes the filter below a window function. So each run's rollups are computed once,
here, from the rows being written (no second pass over the database), and the views read them
back by key: every view costs what one run costs.

``over_repeats`` (tracker/stats.py, re-exported here) is the one definition of the statistics
over measured iterations: the median, min, max, count and spread ((max - min) as a percentage of
|median|). Every surface (views, ``tracker show``, analyses, report) reads its results from
``rollup_time`` and ``rollup_metric``; the GPU idle between launches (``_idle``) from ``rollup_idle``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.engine import Connection

from tracker.metrics import CATALOG, STALLS
from tracker.stats import over_repeats
from tracker.store.ingest import bulk_insert
from tracker.store.schema import Base

TABLES = (
    "rollup_time",
    "rollup_idle",
    "rollup_launch",
    "rollup_metric_repeat",
    "rollup_metric",
    "rollup_stall",
    "rollup_stall_category",
)
STALL_CATEGORY = {m.name: m.category for m in STALLS}
ROLLUP = {m.name: (m.rollup, m.rollup.removeprefix("weighted:")) for m in CATALOG}  # name -> (kind, weight)


def _time(launches: list[dict]) -> list[dict]:
    """Per layer phase: launches per iteration, the event time per iteration over iterations, and
    the algorithm its launches ran (a library's; the first iteration's where they differ)."""
    count: defaultdict[tuple, int] = defaultdict(int)
    algorithm: dict[tuple, str] = {}
    repeats: defaultdict[tuple, set] = defaultdict(set)
    per_repeat: defaultdict[tuple, defaultdict[int, list]] = defaultdict(lambda: defaultdict(list))
    for k in launches:
        key = (k["layer_id"], k["phase"])
        count[key] += 1
        repeats[key].add(k["repeat"])
        if k.get("algorithm") is not None:
            algorithm.setdefault(key, k["algorithm"])
        if k.get("time_ms") is not None:
            per_repeat[key][k["repeat"]].append(k["time_ms"])
    rows = []
    for key in count:
        stats = over_repeats(sum(times) for times in per_repeat[key].values())
        rows.append(
            {
                "layer_id": key[0],
                "phase": key[1],
                "launches": count[key] // len(repeats[key]),
                "measured_ms": stats and stats.median,
                "min_ms": stats and stats.min,
                "max_ms": stats and stats.max,
                "repeats": stats.repeats if stats else 0,
                "spread_pct": stats and stats.spread_pct,
                "algorithm": algorithm.get(key),
            }
        )
    return rows


def _idle(launches: list[dict]) -> list[dict]:
    """Per layer phase and iteration, where launches have starts: the GPU idle before its launches
    (each one's start less the latest end of the iteration's launches that started before it, or
    0; nothing before the iteration's first), summed, as HTA and Nsight Systems count GPU idle.
    Summed over an iteration, the gaps are its span less the union of its launches."""
    by_repeat: defaultdict[int, list[dict]] = defaultdict(list)
    for k in launches:
        if k.get("start_ns") is not None and k.get("time_ms") is not None:
            by_repeat[k["repeat"]].append(k)
    rows: dict[tuple, dict] = {}
    for repeat, timed in by_repeat.items():
        ended = None
        for k in sorted(timed, key=lambda k: (k["start_ns"], k["invocation"])):
            start, end = k["start_ns"], k["start_ns"] + round(k["time_ms"] * 1e6)
            gap = 0 if ended is None else max(0, start - ended)
            ended = end if ended is None else max(ended, end)
            row = rows.setdefault(
                (k["layer_id"], k["phase"], repeat),
                dict(launches=0, busy_ns=0, idle_ns=0, first_start_ns=start, last_end_ns=end),
            )
            row["launches"] += 1
            row["busy_ns"] += end - start
            row["idle_ns"] += gap
            row["last_end_ns"] = max(row["last_end_ns"], end)
    return [
        dict(
            layer_id=layer_id,
            phase=phase,
            repeat=repeat,
            launches=row["launches"],
            busy_ms=row["busy_ns"] / 1e6,
            idle_ms=row["idle_ns"] / 1e6,
            first_start_ns=row["first_start_ns"],
            last_end_ns=row["last_end_ns"],
        )
        for (layer_id, phase, repeat), row in rows.items()
    ]


def _flops(values: dict) -> float:
    """FP32 FLOPs: nvprof's own total where it gave one, else fadd + fmul + 2 ffma (ncu)."""
    if values.get("fp32_flops") is not None:
        return values["fp32_flops"]
    return (values.get("fadd") or 0) + (values.get("fmul") or 0) + 2 * (values.get("ffma") or 0)


def _rolled(rollup: str, values: list, weights: list) -> float | None:
    """One metric over one layer phase's launches in one iteration, as its metric_def.rollup says:
    sum, max, or an average weighted by another metric of the same launch (plain where that one
    was not collected)."""
    if len(values) == 1:  # one launch (most layer phases): the value itself, unless its weight is 0
        return values[0] if rollup in ("sum", "max") or not weights[0] == 0 else None
    present = [v for v in values if v is not None]
    if not present:
        return None
    if rollup == "sum":
        return sum(present)
    if rollup == "max":
        return max(present)
    pairs = [(v, w) for v, w in zip(values, weights) if v is not None and w is not None]
    if not any(w is not None for w in weights):
        return sum(present) / len(present)
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else None


def _group(group: list[dict]) -> dict:
    """Each metric over one layer phase's launches in one iteration (``group``: each launch's
    values by name), as ``_rolled`` says."""
    names = group[0].keys() if len(group) == 1 else sorted({name for values in group for name in values})
    return {
        name: _rolled(
            ROLLUP[name][0], [values.get(name) for values in group], [values.get(ROLLUP[name][1]) for values in group]
        )
        for name in names
    }


def _metrics(launches: list[dict], metrics: Sequence[dict]) -> dict[str, list[dict]]:
    """rollup_launch, rollup_metric_repeat, rollup_metric, rollup_stall, rollup_stall_category rows."""
    by_launch: dict[int, dict] = defaultdict(dict)
    for m in metrics:
        by_launch[m["invocation"]][m["name"]] = m["value"]
    wide = [dict(invocation=i, flops=_flops(values), **values) for i, values in by_launch.items()]
    where = {k["invocation"]: (k["layer_id"], k["phase"], k["repeat"]) for k in launches}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for invocation, values in by_launch.items():
        groups[where[invocation]].append(values)
    per_repeat, per_phase = [], defaultdict(list)
    for (layer_id, phase, repeat), group in groups.items():
        for name, value in _group(group).items():
            per_repeat.append({"layer_id": layer_id, "phase": phase, "repeat": repeat, "name": name, "value": value})
            per_phase[layer_id, phase, name].append(value)
    medians = []
    for (layer_id, phase, name), series in per_phase.items():
        stats = over_repeats(series)
        if stats:
            medians.append(
                {
                    "layer_id": layer_id,
                    "phase": phase,
                    "name": name,
                    "value": stats.median,
                    "min_value": stats.min,
                    "max_value": stats.max,
                    "repeats": stats.repeats,
                    "spread_pct": stats.spread_pct,
                }
            )
    stalls, categories = _stalls(medians)
    return {
        "rollup_launch": wide,
        "rollup_metric_repeat": per_repeat,
        "rollup_metric": medians,
        "rollup_stall": stalls,
        "rollup_stall_category": categories,
    }


def _stalls(medians: list[dict]) -> tuple[list[dict], list[dict]]:
    """Each stall reason's share of all stalls in a layer phase, with its paper-003 (nvprof)
    category; and the categories ranked by share (place 1 dominates)."""
    phases: dict[tuple, list[dict]] = defaultdict(list)
    for row in medians:
        if row["name"] in STALL_CATEGORY:
            phases[row["layer_id"], row["phase"]].append(row)
    stalls, categories = [], []
    for (layer_id, phase), rows in phases.items():
        total = sum(row["value"] for row in rows)
        shares = defaultdict(list)
        for row in rows:
            share = row["value"] / total if total else None
            category = STALL_CATEGORY[row["name"]]
            stalls.append(
                {"layer_id": layer_id, "phase": phase, "name": row["name"], "category": category, "share": share}
            )
            shares[category].append(share)
        summed = {
            c: (sum(s for s in v if s is not None) if any(s is not None for s in v) else None)
            for c, v in shares.items()
        }
        ranked = sorted(summed, key=lambda c: (summed[c] is None, -(summed[c] or 0), c))
        categories += [
            {"layer_id": layer_id, "phase": phase, "category": c, "share": summed[c], "place": i}
            for i, c in enumerate(ranked, 1)
        ]
    return stalls, categories


def write(conn: Connection, run_id: int, launches: list[dict], metrics: Sequence[dict]) -> None:
    """(Re)write the run's rollups from its launch rows and (invocation, name, value) counter rows,
    inside the caller's transaction."""
    for table in reversed(TABLES):
        conn.execute(text(f"DELETE FROM {table} WHERE run_id = :run"), {"run": run_id})
    rows = {"rollup_time": _time(launches), "rollup_idle": _idle(launches), **_metrics(launches, metrics)}
    for table in TABLES:
        bulk_insert(conn, Base.metadata.tables[table], rows[table], run_id=run_id)


def rebuild(conn: Connection) -> int:
    """Every stored run's rollups (a migration from a schema without them); how many runs."""
    runs = [row[0] for row in conn.execute(text("SELECT DISTINCT run_id FROM launch"))]
    for run_id in runs:
        launches = [
            dict(row._mapping)
            for row in conn.execute(
                text(
                    "SELECT invocation, layer_id, phase, repeat, time_ms, start_ns, algorithm "
                    "FROM launch WHERE run_id = :run"
                ),
                {"run": run_id},
            )
        ]
        metrics = [
            dict(row._mapping)
            for row in conn.execute(
                text("SELECT invocation, name, value FROM metric WHERE run_id = :run"), {"run": run_id}
            )
        ]
        write(conn, run_id, launches, metrics)
    return len(runs)
