"""Views over the trace store, in SQL that SQLite and PostgreSQL both run.

Analyses read these views and users query the same ones with ``tracker sql``; ``schema/views.sql``
is rendered from this list. The counter views are generated from the metric catalog
(tracker/metrics.py) and read the per-run rollups (tracker/store/rollups.py): a metric
rolled up over a layer's launches as its ``metric_def`` says, then its median over measured
repeats. Every counter view is per run, layer and phase, one measured iteration.

A view reads tables, never another view. Each view is sorted (``View.create``), and a sorted view
inside an aggregate keeps ``WHERE run_id = ?`` from reaching the rollups: SQLite then groups every
run's rows to answer for one. Read by key, every view costs what one run costs (a test holds the
query plans: tests/test_views_plan.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from tracker.metrics import BY_NAME, CATALOG, STALLS
from tracker.phases import order_sql

LAYER_PHASE = ("run_id", "layer_id", "phase")  # how the per-layer-phase views list their rows


@dataclass(frozen=True)
class View:
    """A view, listed in ``order`` (its key columns: ``phase`` in PHASES' order, fwd, bwd_data,
    bwd_weight, as every table and `tracker show` list them); its SQL holds no '%' (psycopg would
    read it as a placeholder)."""

    name: str
    doc: str
    select: str
    order: tuple[str, ...] = LAYER_PHASE

    def create(self) -> str:
        # Sorted outside the select: PostgreSQL takes no output column's alias inside an ORDER BY expression.
        keys = ", ".join(order_sql(f"v.{key}") if key == "phase" else f"v.{key}" for key in self.order)
        return f"CREATE VIEW {self.name} AS\nSELECT * FROM (\n{self.select.strip()}\n) v\nORDER BY {keys}"


def _pivot(names, source: str = "s") -> str:
    """One column per metric name, from a narrow (name, value) source. A name outside the catalog
    would only ever be NULL, so it stops the import instead."""
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"views name metrics the catalog does not have: {unknown}")
    return ",\n".join(f"       MAX(CASE WHEN {source}.name = '{n}' THEN {source}.value END) AS {n}" for n in names)


def _per_layer(columns: str, names) -> str:
    """A wide per-layer-phase view: the medians of ``names`` pivoted, then ``columns`` computed on them."""
    return f"""
SELECT w.run_id, w.layer_id, l.name AS layer, l.kind, w.phase, {columns}
FROM (SELECT s.run_id, s.layer_id, s.phase,
{_pivot(names)}
      FROM rollup_metric s GROUP BY s.run_id, s.layer_id, s.phase) w
JOIN layer l ON l.run_id = w.run_id AND l.layer_id = w.layer_id
LEFT JOIN prediction p ON p.run_id = w.run_id AND p.layer_id = w.layer_id AND p.phase = w.phase
"""


# nvprof on old GPUs may give only its total (fp32_flops); ncu gives the three instruction counts.
FLOPS = "COALESCE(w.fp32_flops, COALESCE(w.fadd, 0) + COALESCE(w.fmul, 0) + 2 * COALESCE(w.ffma, 0))"
FLOP_INPUTS = ("fadd", "fmul", "ffma", "fp32_flops")
DRAM_BYTES = "(w.dram_read_bytes + w.dram_write_bytes)"
SECONDS = "(w.duration_ns * 1.0e-9)"


def _per_second(expr: str) -> str:
    return f"CASE WHEN w.duration_ns > 0 THEN {expr} / {SECONDS} END"


def _ratio(num: str, den: str) -> str:
    return f"CASE WHEN {den} > 0 THEN {num} * 1.0 / {den} END"


_STALL_NAMES = [m.name for m in STALLS]

COUNTER_VIEWS = (
    View(
        "launch_metrics",
        "One row per profiled launch: the launch log (pass 1) beside every counter of the catalog "
        "(pass 2), one column per metric_def name, plus FP32 FLOPs = fadd + fmul + 2 ffma (or nvprof's total).",
        f"""
SELECT k.run_id, k.invocation, k.layer_id, l.name AS layer, k.phase, k.repeat, k.kernel_name, k.variant,
       k.l1_policy, k.time_ms,
       {", ".join(f"r.{m.name}" for m in CATALOG)},
       r.flops, k.algorithm, k.role, k.start_ns
FROM launch k
JOIN layer l ON l.run_id = k.run_id AND l.layer_id = k.layer_id
JOIN rollup_launch r ON r.run_id = k.run_id AND r.invocation = k.invocation
""",
        ("run_id", "invocation"),
    ),
    View(
        "layer_metric_repeat",
        "Each metric rolled up over one layer phase's launches in one measured iteration, as its "
        "metric_def.rollup says: sum, max, or an average weighted by another metric of the same launch "
        "(a plain average where that metric was not collected). Computed when the run is written.",
        """
SELECT run_id, layer_id, phase, repeat, name, value FROM rollup_metric_repeat
""",
        (*LAYER_PHASE, "repeat", "name"),
    ),
    View(
        "layer_metric",
        "Per run, layer, phase and metric: the median over measured repeats, the smallest and largest "
        "value, and the spread (max - min) as a percentage of the median. Computed when the run is written.",
        """
SELECT run_id, layer_id, phase, name, value, min_value, max_value, repeats, spread_pct FROM rollup_metric
""",
        (*LAYER_PHASE, "name"),
    ),
    View(
        "layer_summary",
        "Per run, layer and phase (median over repeats): kernel time from ncu, FP32 FLOPs measured "
        "against the model's ops, and bytes per memory level against the model's compulsory bytes.",
        _per_layer(
            f"""w.duration_ns * 1.0e-6 AS duration_ms, w.instructions,
       {FLOPS} AS flops, p.ops AS model_ops, {_ratio(FLOPS, "p.ops")} AS flops_per_model_op,
       w.l1_bytes, w.shared_bytes, w.l2_bytes, {DRAM_BYTES} AS dram_bytes,
       p.bytes AS model_bytes, {_ratio(DRAM_BYTES, "p.bytes")} AS dram_per_model_byte""",
            [
                "duration_ns",
                "instructions",
                *FLOP_INPUTS,
                "l1_bytes",
                "shared_bytes",
                "l2_bytes",
                "dram_read_bytes",
                "dram_write_bytes",
            ],
        ),
    ),
    View(
        "stall_breakdown",
        "Per run, layer and phase: each stall reason as a fraction of all stalls (the ncu warp states, "
        "or nvprof's stall_* on older GPUs; 'selected' is not a stall), and the two dominant reasons "
        "as paper 003 (nvprof) names them, with their shares.",
        f"""
SELECT w.run_id, w.layer_id, l.name AS layer, l.kind, w.phase,
       c1.category AS first_reason, c1.share AS first_share,
       c2.category AS second_reason, c2.share AS second_share,
       {", ".join(f"w.{n}" for n in _STALL_NAMES)}
FROM (SELECT s.run_id, s.layer_id, s.phase,
{_pivot(_STALL_NAMES, "s").replace("s.value", "s.share")}
      FROM rollup_stall s GROUP BY s.run_id, s.layer_id, s.phase) w
JOIN layer l ON l.run_id = w.run_id AND l.layer_id = w.layer_id
LEFT JOIN rollup_stall_category c1 ON c1.run_id = w.run_id AND c1.layer_id = w.layer_id AND c1.phase = w.phase
                                  AND c1.place = 1
LEFT JOIN rollup_stall_category c2 ON c2.run_id = w.run_id AND c2.layer_id = w.layer_id AND c2.phase = w.phase
                                  AND c2.place = 2
""",
    ),
    View(
        "cache_hit_rate",
        "Per run, layer and phase: L1/TEX and L2 hit rates in %, each averaged over the layer's launches "
        "weighted by the sectors it is a rate of (under ncu's default --cache-control all, cold caches).",
        _per_layer(
            "w.l1_hit_rate, w.l1_global_load_hit_rate, w.l2_hit_rate, w.l2_read_hit_rate, w.l2_write_hit_rate",
            ["l1_hit_rate", "l1_global_load_hit_rate", "l2_hit_rate", "l2_read_hit_rate", "l2_write_hit_rate"],
        ),
    ),
    View(
        "memory_traffic",
        "Per run, layer and phase: requests, sectors and bytes per memory level (L1/TEX global and "
        "local, shared, L2, DRAM), throughput in bytes per second of kernel time, and % of each level's peak.",
        _per_layer(
            f"""w.l1_global_load_requests, w.l1_global_load_sectors, w.l1_global_store_requests,
       w.l1_global_store_sectors, w.l1_local_load_sectors, w.l1_local_store_sectors, w.l1_bytes,
       w.shared_load_wavefronts, w.shared_store_wavefronts, w.shared_load_bank_conflicts,
       w.shared_store_bank_conflicts, w.shared_bytes, w.l2_read_sectors, w.l2_write_sectors, w.l2_bytes,
       w.dram_read_sectors, w.dram_write_sectors, w.dram_read_bytes, w.dram_write_bytes,
       {_per_second("w.l1_bytes")} AS l1_bytes_per_s, {_per_second("w.shared_bytes")} AS shared_bytes_per_s,
       {_per_second("w.l2_bytes")} AS l2_bytes_per_s,
       {_per_second(DRAM_BYTES)} AS dram_bytes_per_s,
       w.l1_throughput_pct, w.shared_throughput_pct, w.l2_throughput_pct, w.dram_throughput_pct""",
            [
                "duration_ns",
                "l1_global_load_requests",
                "l1_global_load_sectors",
                "l1_global_store_requests",
                "l1_global_store_sectors",
                "l1_local_load_sectors",
                "l1_local_store_sectors",
                "l1_bytes",
                "shared_load_wavefronts",
                "shared_store_wavefronts",
                "shared_load_bank_conflicts",
                "shared_store_bank_conflicts",
                "shared_bytes",
                "l2_read_sectors",
                "l2_write_sectors",
                "l2_bytes",
                "dram_read_sectors",
                "dram_write_sectors",
                "dram_read_bytes",
                "dram_write_bytes",
                "l1_throughput_pct",
                "shared_throughput_pct",
                "l2_throughput_pct",
                "dram_throughput_pct",
            ],
        ),
    ),
    View(
        "fp_instructions",
        "Per run, layer and phase: FP32 add, multiply and FMA thread instructions, all FP32 "
        "instructions, FLOPs = fadd + fmul + 2 ffma against the model's ops, and achieved FLOP/s.",
        _per_layer(
            f"""w.fadd, w.fmul, w.ffma, w.fp32_inst, {FLOPS} AS flops, p.ops AS model_ops,
       {_ratio(FLOPS, "p.ops")} AS flops_per_model_op, {_per_second(FLOPS)} AS flops_per_s""",
            ["duration_ns", *FLOP_INPUTS, "fp32_inst"],
        ),
    ),
    View(
        "utilization",
        "Per run, layer and phase: occupancy, SM efficiency, IPC, issue slots, eligible warps, warp "
        "execution efficiency, pipe utilization (FMA, ALU, LSU, XU) and compute/memory throughput, in %.",
        _per_layer(
            """w.achieved_occupancy, w.sm_efficiency, w.ipc, w.issue_slot_pct, w.eligible_warps,
       w.warp_execution_efficiency, w.fma_pipe_pct, w.alu_pipe_pct, w.lsu_pipe_pct, w.xu_pipe_pct,
       w.sm_throughput_pct, w.memory_throughput_pct""",
            [
                "achieved_occupancy",
                "sm_efficiency",
                "ipc",
                "issue_slot_pct",
                "eligible_warps",
                "warp_execution_efficiency",
                "fma_pipe_pct",
                "alu_pipe_pct",
                "lsu_pipe_pct",
                "xu_pipe_pct",
                "sm_throughput_pct",
                "memory_throughput_pct",
            ],
        ),
    ),
    View(
        "roofline",
        "Per run, layer and phase: achieved FP32 FLOP/s and arithmetic intensity (FLOPs per byte) at "
        "L1 (local/global writeback x 128 B), L2 (L2-to-L1 reads) and DRAM, against the peaks ncu "
        "measures (per-cycle peak x the clock during the run), as ncu's hierarchical roofline does.",
        _per_layer(
            f"""{FLOPS} AS flops, {_per_second(FLOPS)} AS flops_per_s,
       {_ratio(FLOPS, "(128 * w.l1_lg_writeback_cycles)")} AS l1_intensity,
       {_ratio(FLOPS, "w.l2_to_l1_read_bytes")} AS l2_intensity,
       {_ratio(FLOPS, DRAM_BYTES)} AS dram_intensity,
       2 * w.ffma_peak_per_cycle * w.sm_clock_hz AS peak_flops_per_s,
       128 * w.l1_lg_writeback_peak_per_cycle * w.l1_clock_hz AS l1_peak_bytes_per_s,
       w.l2_to_l1_bytes_peak_per_cycle * w.l2_clock_hz AS l2_peak_bytes_per_s,
       w.dram_bytes_peak_per_cycle * w.dram_clock_hz AS dram_peak_bytes_per_s,
       p.intensity AS model_intensity""",
            [
                "duration_ns",
                *FLOP_INPUTS,
                "l1_lg_writeback_cycles",
                "l2_to_l1_read_bytes",
                "dram_read_bytes",
                "dram_write_bytes",
                "ffma_peak_per_cycle",
                "sm_clock_hz",
                "l1_lg_writeback_peak_per_cycle",
                "l1_clock_hz",
                "l2_to_l1_bytes_peak_per_cycle",
                "l2_clock_hz",
                "dram_bytes_peak_per_cycle",
                "dram_clock_hz",
            ],
        ),
    ),
)

IDLE_VIEWS = (
    View(
        "layer_idle",
        "GPU idle per run, layer, phase and measured iteration, where the launches have starts (imported "
        "traces, the library arm, ours on a GPU): the idle time before the phase's launches (each one's "
        "wait since every earlier launch of its iteration had ended, 0 where it overlapped one), summed, "
        "beside the time they ran. Summed over an iteration's layer phases, the iteration's idle.",
        """
SELECT r.run_id, r.layer_id, l.name AS layer, l.kind, r.phase, r.repeat, r.launches, r.busy_ms, r.idle_ms
FROM rollup_idle r
JOIN layer l ON l.run_id = r.run_id AND l.layer_id = r.layer_id
""",
        (*LAYER_PHASE, "repeat"),
    ),
    View(
        "iteration_idle",
        "GPU idle per run and measured iteration: from its first launch's start to its last one's end "
        "(span_ms), the time no launch of it ran (idle_ms, as HTA and Nsight Systems count GPU idle) and "
        "its share of the span (idle_pct).",
        """
SELECT run_id, repeat, SUM(launches) AS launches, (MAX(last_end_ns) - MIN(first_start_ns)) / 1.0e6 AS span_ms,
       SUM(idle_ms) AS idle_ms,
       CASE WHEN MAX(last_end_ns) > MIN(first_start_ns)
            THEN 100.0 * SUM(idle_ms) * 1.0e6 / (MAX(last_end_ns) - MIN(first_start_ns)) END AS idle_pct
FROM rollup_idle
GROUP BY run_id, repeat
""",
        ("run_id", "repeat"),
    ),
)

# What only a measured run fills, by what it holds: a model run stores predictions alone, and a
# run without a counter collector (events) no counters (tracker.store.queries.why_empty says so).
COUNTERS = ("metric", *(view.name for view in COUNTER_VIEWS))
MEASUREMENTS = ("launch", "layer_time", "layer_time_repeat", *(view.name for view in IDLE_VIEWS))

VIEWS = (
    View(
        "layer_time",
        "Measured time per run, layer and phase: event time summed over the phase's launches, the median "
        "over measured repeats (NULL where nothing was timed), with min, max and spread in %, and the "
        "algorithm its kernels ran (launch.algorithm). Computed when the run is written.",
        """
SELECT run_id, layer_id, phase, launches, measured_ms, min_ms, max_ms, repeats, spread_pct, algorithm
FROM rollup_time
""",
    ),
    View(
        "layer_time_repeat",
        "Measured time per run, layer, phase and measured iteration: the event time of the phase's "
        "launches in that iteration (the median and spread over iterations are taken from this).",
        """
SELECT run_id, layer_id, phase, repeat, COUNT(*) AS launches, SUM(time_ms) AS measured_ms
FROM launch
WHERE time_ms IS NOT NULL
GROUP BY run_id, layer_id, phase, repeat
""",
        (*LAYER_PHASE, "repeat"),
    ),
    View(
        "layer_phase",
        "One row per run, layer and phase: the model's prediction beside the measurement, and the "
        "algorithm its kernels ran (ours or a library's). achieved_gflops = model ops / measured time.",
        """
SELECT l.run_id, l.layer_id, l.name AS layer, l.kind, p.phase, l.output_shape, l.params,
       p.macs, p.ops, p.bytes, p.intensity, p.attainable_gflops, p.predicted_ms, p.bound,
       t.launches, t.measured_ms,
       CASE WHEN t.measured_ms > 0 THEN p.ops / (t.measured_ms * 1.0e6) END AS achieved_gflops, t.algorithm
FROM layer l
JOIN prediction p ON p.run_id = l.run_id AND p.layer_id = l.layer_id
LEFT JOIN rollup_time t ON t.run_id = p.run_id AND t.layer_id = p.layer_id AND t.phase = p.phase
""",
    ),
    View(
        "run_summary",
        "One row per run: settings, stored status (see `tracker runs` for runs whose process died), "
        "totals over its layers, and how many measured iterations carry counters (NULL: none).",
        """
SELECT r.id AS run_id, r.status, r.network, r.batch, r.phases, r.backend, r.device_name,
       r.started_at, r.finished_at,
       (SELECT COUNT(*) FROM layer l WHERE l.run_id = r.id) AS layers,
       (SELECT COUNT(*) FROM launch k WHERE k.run_id = r.id) AS launches,
       (SELECT SUM(p.ops) FROM prediction p WHERE p.run_id = r.id) AS ops,
       (SELECT SUM(p.bytes) FROM prediction p WHERE p.run_id = r.id) AS bytes,
       (SELECT SUM(p.predicted_ms) FROM prediction p WHERE p.run_id = r.id) AS predicted_ms,
       (SELECT SUM(t.measured_ms) FROM rollup_time t WHERE t.run_id = r.id) AS measured_ms,
       r.predicted_peak_bytes, r.measured_peak_bytes, r.implementation, r.counter_iterations
FROM run r
""",
        ("run_id",),
    ),
    *IDLE_VIEWS,
    *COUNTER_VIEWS,
)
