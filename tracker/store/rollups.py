"""Per-run rollups: a run's times and counters summarised over its launches and its measured
iterations, written in the same transaction as the launches and counters themselves.

A view that aggregates over the whole store (medians by window functions, pivots by GROUP BY)
costs what the whole store costs, whatever ``WHERE run_id = ?`` says: SQLite and PostgreSQL
cannot push the filter below a window function. Computing each run's rollups once, when it is
written, and reading them back by key makes every view cost what one run costs.

``over_repeats`` is the one definition of the statistics over measured iterations: the median,
min, max, count and spread (max - min as a percentage of |median|). Every surface (views,
``tracker show``, analyses, report) reads its results from ``rollup_time`` and ``rollup_metric``.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import Connection

from tracker.profilers.catalog import BY_NAME, CATALOG, STALLS

# In the order they are computed: each reads the ones before it.
TABLES = ("rollup_time", "rollup_launch", "rollup_metric_repeat", "rollup_metric", "rollup_stall",
          "rollup_stall_category")
LAUNCH_METRICS = tuple(m.name for m in CATALOG)  # rollup_launch's columns, one per catalog metric
STALL_CATEGORY = {m.name: m.category for m in STALLS}


def pivot(names, source: str = "s") -> str:
    """One column per metric name, from a narrow (name, value) source. A name outside the catalog
    would only ever be NULL, so it stops the import instead."""
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"rollups and views name metrics the catalog does not have: {unknown}")
    return ",\n".join(f"       MAX(CASE WHEN {source}.name = '{n}' THEN {source}.value END) AS {n}" for n in names)


def over_repeats(source: str, keys: tuple[str, ...], value: str) -> str:
    """SELECT ``keys``, median, min, max, repeats, spread_pct of ``value`` over the rows of
    ``source`` (one per measured iteration) that share ``keys``; NULL values are left out."""
    by = ", ".join(keys)
    median = "AVG(CASE WHEN i = (n + 1) / 2 OR i = (n + 2) / 2 THEN v END)"
    return f"""
SELECT {by}, {median} AS median, MIN(v) AS min_v, MAX(v) AS max_v, MAX(n) AS repeats,
       CASE WHEN {median} <> 0 THEN 100.0 * (MAX(v) - MIN(v)) / ABS({median}) END AS spread_pct
FROM (SELECT {by}, {value} AS v,
             ROW_NUMBER() OVER (PARTITION BY {by} ORDER BY {value}) AS i,
             COUNT(*) OVER (PARTITION BY {by}) AS n
      FROM ({source}) per_repeat WHERE {value} IS NOT NULL) ranked
GROUP BY {by}"""


_TIME = f"""
INSERT INTO rollup_time (run_id, layer_id, phase, launches, measured_ms, min_ms, max_ms, repeats, spread_pct)
SELECT c.run_id, c.layer_id, c.phase, c.launches, s.median, s.min_v, s.max_v, COALESCE(s.repeats, 0), s.spread_pct
FROM (SELECT run_id, layer_id, phase, COUNT(*) / COUNT(DISTINCT repeat) AS launches
      FROM launch WHERE run_id = :run GROUP BY run_id, layer_id, phase) c
LEFT JOIN ({over_repeats('''SELECT run_id, layer_id, phase, repeat, SUM(time_ms) AS ms FROM launch
                 WHERE run_id = :run AND time_ms IS NOT NULL GROUP BY run_id, layer_id, phase, repeat''',
                         ("run_id", "layer_id", "phase"), "ms")}) s
  ON s.run_id = c.run_id AND s.layer_id = c.layer_id AND s.phase = c.phase
"""

# Each metric over one layer phase's launches in one iteration, as metric_def.rollup says: sum, max,
# or an average weighted by another metric of the same launch (plain where that one is missing).
_METRIC_REPEAT = """
INSERT INTO rollup_metric_repeat (run_id, layer_id, phase, repeat, name, value)
SELECT k.run_id, k.layer_id, k.phase, k.repeat, m.name,
       CASE WHEN d.rollup = 'sum' THEN SUM(m.value)
            WHEN d.rollup = 'max' THEN MAX(m.value)
            WHEN COUNT(w.value) = 0 THEN AVG(m.value)
            ELSE SUM(m.value * w.value) / NULLIF(SUM(CASE WHEN m.value IS NOT NULL THEN w.value END), 0)
       END AS value
FROM metric m
JOIN launch k ON k.run_id = m.run_id AND k.invocation = m.invocation
JOIN metric_def d ON d.name = m.name
LEFT JOIN metric w ON w.run_id = m.run_id AND w.invocation = m.invocation
                  AND SUBSTR(d.rollup, 1, 9) = 'weighted:' AND w.name = SUBSTR(d.rollup, 10)
WHERE m.run_id = :run AND k.run_id = :run
GROUP BY k.run_id, k.layer_id, k.phase, k.repeat, m.name, d.rollup
"""

_METRIC = f"""
INSERT INTO rollup_metric (run_id, layer_id, phase, name, value, min_value, max_value, repeats, spread_pct)
{over_repeats("SELECT * FROM rollup_metric_repeat WHERE run_id = :run", ("run_id", "layer_id", "phase", "name"),
              "value")}
"""


# One row per profiled launch, a column per catalog metric, and FP32 FLOPs = fadd + fmul + 2 ffma
# (or nvprof's own total): the pivot launch_metrics shows, done once.
_LAUNCH = f"""
INSERT INTO rollup_launch (run_id, invocation, {", ".join(LAUNCH_METRICS)}, flops)
SELECT m.run_id, m.invocation,
{pivot(LAUNCH_METRICS, "m")},
       COALESCE(MAX(CASE WHEN m.name = 'fp32_flops' THEN m.value END),
                COALESCE(MAX(CASE WHEN m.name = 'fadd' THEN m.value END), 0)
                + COALESCE(MAX(CASE WHEN m.name = 'fmul' THEN m.value END), 0)
                + 2 * COALESCE(MAX(CASE WHEN m.name = 'ffma' THEN m.value END), 0)) AS flops
FROM metric m WHERE m.run_id = :run
GROUP BY m.run_id, m.invocation
"""

# Each stall reason's share of all stalls in a layer phase, with its paper-003 (nvprof) category.
_STALL = f"""
INSERT INTO rollup_stall (run_id, layer_id, phase, name, category, share)
SELECT s.run_id, s.layer_id, s.phase, s.name,
       CASE s.name {" ".join(f"WHEN '{n}' THEN '{c}'" for n, c in STALL_CATEGORY.items())} END,
       s.value / NULLIF(SUM(s.value) OVER (PARTITION BY s.run_id, s.layer_id, s.phase), 0)
FROM rollup_metric s JOIN metric_def d ON d.name = s.name AND d.family = 'stall'
WHERE s.run_id = :run
"""

# The categories of a layer phase ranked by their share (place 1 dominates).
_STALL_CATEGORY = """
INSERT INTO rollup_stall_category (run_id, layer_id, phase, category, share, place)
SELECT run_id, layer_id, phase, category, SUM(share),
       ROW_NUMBER() OVER (PARTITION BY run_id, layer_id, phase ORDER BY SUM(share) DESC, category)
FROM rollup_stall WHERE run_id = :run
GROUP BY run_id, layer_id, phase, category
"""


def write(conn: Connection, run_id: int) -> None:
    """(Re)compute the run's rollups from its launches and counters, inside the caller's transaction."""
    for table in reversed(TABLES):
        conn.execute(text(f"DELETE FROM {table} WHERE run_id = :run"), {"run": run_id})
    for statement in (_TIME, _LAUNCH, _METRIC_REPEAT, _METRIC, _STALL, _STALL_CATEGORY):
        conn.execute(text(statement), {"run": run_id})


def rebuild(conn: Connection) -> int:
    """Every stored run's rollups (a migration from a schema without them); how many runs."""
    runs = [row[0] for row in conn.execute(text("SELECT DISTINCT run_id FROM launch"))]
    for run_id in runs:
        write(conn, run_id)
    return len(runs)
