-- tracker trace store, schema v17: views
-- Rendered from tracker/store/views.py by `python -m tracker.store.contract`; do not edit by hand.
-- Portable SQL: the same views run on SQLite and PostgreSQL.

-- Measured time per run, layer and phase: event time summed over the phase's launches, the median over measured repeats (NULL where nothing was timed), with min, max and spread in %, and the algorithm its kernels ran (launch.algorithm). Computed when the run is written.
CREATE VIEW layer_time AS
SELECT * FROM (
SELECT run_id, layer_id, phase, launches, measured_ms, min_ms, max_ms, repeats, spread_pct, algorithm
FROM rollup_time
) v
ORDER BY v.run_id, v.layer_id, CASE v.phase WHEN 'fwd' THEN 0 WHEN 'bwd_data' THEN 1 WHEN 'bwd_weight' THEN 2 END;

-- Measured time per run, layer, phase and measured iteration: the event time of the phase's launches in that iteration (the median and spread over iterations are taken from this).
CREATE VIEW layer_time_repeat AS
SELECT * FROM (
SELECT run_id, layer_id, phase, repeat, COUNT(*) AS launches, SUM(time_ms) AS measured_ms
FROM launch
WHERE time_ms IS NOT NULL
GROUP BY run_id, layer_id, phase, repeat
) v
ORDER BY v.run_id, v.layer_id, CASE v.phase WHEN 'fwd' THEN 0 WHEN 'bwd_data' THEN 1 WHEN 'bwd_weight' THEN 2 END, v.repeat;

-- One row per run, layer and phase: the model's prediction beside the measurement, and the algorithm its kernels ran (ours or a library's). achieved_gflops = model ops / measured time.
CREATE VIEW layer_phase AS
SELECT * FROM (
SELECT l.run_id, l.layer_id, l.name AS layer, l.kind, p.phase, l.output_shape, l.params,
       p.macs, p.ops, p.bytes, p.intensity, p.attainable_gflops, p.predicted_ms, p.bound,
       t.launches, t.measured_ms,
       CASE WHEN t.measured_ms > 0 THEN p.ops / (t.measured_ms * 1.0e6) END AS achieved_gflops, t.algorithm
FROM layer l
JOIN prediction p ON p.run_id = l.run_id AND p.layer_id = l.layer_id
LEFT JOIN rollup_time t ON t.run_id = p.run_id AND t.layer_id = p.layer_id AND t.phase = p.phase
) v
ORDER BY v.run_id, v.layer_id, CASE v.phase WHEN 'fwd' THEN 0 WHEN 'bwd_data' THEN 1 WHEN 'bwd_weight' THEN 2 END;

-- One row per run: settings, stored status (see `tracker runs` for runs whose process died), totals over its layers, and how many measured iterations carry counters (NULL: none).
CREATE VIEW run_summary AS
SELECT * FROM (
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
) v
ORDER BY v.run_id;

-- GPU idle per run, layer, phase and measured iteration, where the launches have starts (imported traces, the library arm, ours on a GPU): the idle time before the phase's launches (each one's wait since every earlier launch of its iteration had ended, 0 where it overlapped one), summed, beside the time they ran. Summed over an iteration's layer phases, the iteration's idle.
CREATE VIEW layer_idle AS
SELECT * FROM (
SELECT r.run_id, r.layer_id, l.name AS layer, l.kind, r.phase, r.repeat, r.launches, r.busy_ms, r.idle_ms
FROM rollup_idle r
JOIN layer l ON l.run_id = r.run_id AND l.layer_id = r.layer_id
) v
ORDER BY v.run_id, v.layer_id, CASE v.phase WHEN 'fwd' THEN 0 WHEN 'bwd_data' THEN 1 WHEN 'bwd_weight' THEN 2 END, v.repeat;

-- GPU idle per run and measured iteration: from its first launch's start to its last one's end (span_ms), the time no launch of it ran (idle_ms, as HTA and Nsight Systems count GPU idle) and its share of the span (idle_pct).
CREATE VIEW iteration_idle AS
SELECT * FROM (
SELECT run_id, repeat, SUM(launches) AS launches, (MAX(last_end_ns) - MIN(first_start_ns)) / 1.0e6 AS span_ms,
       SUM(idle_ms) AS idle_ms,
       CASE WHEN MAX(last_end_ns) > MIN(first_start_ns)
            THEN 100.0 * SUM(idle_ms) * 1.0e6 / (MAX(last_end_ns) - MIN(first_start_ns)) END AS idle_pct
FROM rollup_idle
GROUP BY run_id, repeat
) v
ORDER BY v.run_id, v.repeat;

-- One row per profiled launch: the launch log (pass 1) beside every counter of the catalog (pass 2), one column per metric_def name, plus FP32 FLOPs = fadd + fmul + 2 ffma (or nvprof's total).
CREATE VIEW launch_metrics AS
SELECT * FROM (
SELECT k.run_id, k.invocation, k.layer_id, l.name AS layer, k.phase, k.repeat, k.kernel_name, k.variant,
       k.l1_policy, k.time_ms,
       r.duration_ns, r.cycles_elapsed, r.sm_active_cycles, r.sm_clock_hz, r.dram_clock_hz, r.l2_clock_hz, r.l1_clock_hz, r.fadd, r.fmul, r.ffma, r.fp32_flops, r.fp32_inst, r.instructions, r.stall_barrier, r.stall_branch_resolving, r.stall_dispatch_stall, r.stall_drain, r.stall_imc_miss, r.stall_lg_throttle, r.stall_long_scoreboard, r.stall_math_pipe_throttle, r.stall_membar, r.stall_mio_throttle, r.stall_misc, r.stall_no_instruction, r.stall_not_selected, r.stall_short_scoreboard, r.stall_sleeping, r.stall_tex_throttle, r.stall_wait, r.stall_gmma, r.stall_exec_dependency, r.stall_memory_throttle, r.stall_pipe_busy, r.stall_sync, r.stall_other, r.stall_selected, r.warps_per_issue, r.l1_hit_rate, r.l1_global_load_hit_rate, r.l2_hit_rate, r.l2_read_hit_rate, r.l2_write_hit_rate, r.l1_global_load_requests, r.l1_global_load_sectors, r.l1_global_store_requests, r.l1_global_store_sectors, r.l1_local_load_sectors, r.l1_local_store_sectors, r.l1_requests, r.l1_sectors, r.l1_bytes, r.shared_load_wavefronts, r.shared_store_wavefronts, r.shared_load_bank_conflicts, r.shared_store_bank_conflicts, r.shared_bytes, r.l2_read_sectors, r.l2_write_sectors, r.l2_sectors, r.l2_bytes, r.l2_to_l1_read_bytes, r.l1_to_l2_write_bytes, r.dram_read_sectors, r.dram_write_sectors, r.dram_read_bytes, r.dram_write_bytes, r.l1_lg_writeback_cycles, r.sm_throughput_pct, r.memory_throughput_pct, r.l1_throughput_pct, r.shared_throughput_pct, r.l2_throughput_pct, r.dram_throughput_pct, r.achieved_occupancy, r.sm_efficiency, r.ipc, r.issue_slot_pct, r.eligible_warps, r.warp_execution_efficiency, r.fma_pipe_pct, r.alu_pipe_pct, r.lsu_pipe_pct, r.xu_pipe_pct, r.fp32_fu_utilization_level, r.ldst_fu_utilization_level, r.special_fu_utilization_level, r.shared_utilization_level, r.l1_utilization_level, r.l2_utilization_level, r.dram_utilization_level, r.ffma_peak_per_cycle, r.dram_bytes_peak_per_cycle, r.l2_to_l1_bytes_peak_per_cycle, r.l1_lg_writeback_peak_per_cycle, r.replay_passes,
       r.flops, k.algorithm, k.role, k.start_ns
FROM launch k
JOIN layer l ON l.run_id = k.run_id AND l.layer_id = k.layer_id
JOIN rollup_launch r ON r.run_id = k.run_id AND r.invocation = k.invocation
) v
ORDER BY v.run_id, v.invocation;

-- Each metric rolled up over one layer phase's launches in one measured iteration, as its metric_def.rollup says: sum, max, or an average weighted by another metric of the same launch (a plain average where that metric was not collected). Computed when the run is written.
CREATE VIEW layer_metric_repeat AS
SELECT * FROM (
SELECT run_id, layer_id, phase, repeat, name, value FROM rollup_metric_repeat
) v
ORDER BY v.run_id, v.layer_id, CASE v.phase WHEN 'fwd' THEN 0 WHEN 'bwd_data' THEN 1 WHEN 'bwd_weight' THEN 2 END, v.repeat, v.name;

-- Per run, layer, phase and metric: the median over measured repeats, the smallest and largest value, and the spread (max - min) as a percentage of the median. Computed when the run is written.
CREATE VIEW layer_metric AS
SELECT * FROM (
SELECT run_id, layer_id, phase, name, value, min_value, max_value, repeats, spread_pct FROM rollup_metric
) v
ORDER BY v.run_id, v.layer_id, CASE v.phase WHEN 'fwd' THEN 0 WHEN 'bwd_data' THEN 1 WHEN 'bwd_weight' THEN 2 END, v.name;

-- Per run, layer and phase (median over repeats): kernel time from ncu, FP32 FLOPs measured against the model's ops, and bytes per memory level against the model's compulsory bytes.
CREATE VIEW layer_summary AS
SELECT * FROM (
SELECT w.run_id, w.layer_id, l.name AS layer, l.kind, w.phase, w.duration_ns * 1.0e-6 AS duration_ms, w.instructions,
       COALESCE(w.fp32_flops, COALESCE(w.fadd, 0) + COALESCE(w.fmul, 0) + 2 * COALESCE(w.ffma, 0)) AS flops, p.ops AS model_ops, CASE WHEN p.ops > 0 THEN COALESCE(w.fp32_flops, COALESCE(w.fadd, 0) + COALESCE(w.fmul, 0) + 2 * COALESCE(w.ffma, 0)) * 1.0 / p.ops END AS flops_per_model_op,
       w.l1_bytes, w.shared_bytes, w.l2_bytes, (w.dram_read_bytes + w.dram_write_bytes) AS dram_bytes,
       p.bytes AS model_bytes, CASE WHEN p.bytes > 0 THEN (w.dram_read_bytes + w.dram_write_bytes) * 1.0 / p.bytes END AS dram_per_model_byte
FROM (SELECT s.run_id, s.layer_id, s.phase,
       MAX(CASE WHEN s.name = 'duration_ns' THEN s.value END) AS duration_ns,
       MAX(CASE WHEN s.name = 'instructions' THEN s.value END) AS instructions,
       MAX(CASE WHEN s.name = 'fadd' THEN s.value END) AS fadd,
       MAX(CASE WHEN s.name = 'fmul' THEN s.value END) AS fmul,
       MAX(CASE WHEN s.name = 'ffma' THEN s.value END) AS ffma,
       MAX(CASE WHEN s.name = 'fp32_flops' THEN s.value END) AS fp32_flops,
       MAX(CASE WHEN s.name = 'l1_bytes' THEN s.value END) AS l1_bytes,
       MAX(CASE WHEN s.name = 'shared_bytes' THEN s.value END) AS shared_bytes,
       MAX(CASE WHEN s.name = 'l2_bytes' THEN s.value END) AS l2_bytes,
       MAX(CASE WHEN s.name = 'dram_read_bytes' THEN s.value END) AS dram_read_bytes,
       MAX(CASE WHEN s.name = 'dram_write_bytes' THEN s.value END) AS dram_write_bytes
      FROM rollup_metric s GROUP BY s.run_id, s.layer_id, s.phase) w
JOIN layer l ON l.run_id = w.run_id AND l.layer_id = w.layer_id
LEFT JOIN prediction p ON p.run_id = w.run_id AND p.layer_id = w.layer_id AND p.phase = w.phase
) v
ORDER BY v.run_id, v.layer_id, CASE v.phase WHEN 'fwd' THEN 0 WHEN 'bwd_data' THEN 1 WHEN 'bwd_weight' THEN 2 END;

-- Per run, layer and phase: each stall reason as a fraction of all stalls (the ncu warp states, or nvprof's stall_* on older GPUs; 'selected' is not a stall), and the two dominant reasons as paper 003 (nvprof) names them, with their shares.
CREATE VIEW stall_breakdown AS
SELECT * FROM (
SELECT w.run_id, w.layer_id, l.name AS layer, l.kind, w.phase,
       c1.category AS first_reason, c1.share AS first_share,
       c2.category AS second_reason, c2.share AS second_share,
       w.stall_barrier, w.stall_branch_resolving, w.stall_dispatch_stall, w.stall_drain, w.stall_imc_miss, w.stall_lg_throttle, w.stall_long_scoreboard, w.stall_math_pipe_throttle, w.stall_membar, w.stall_mio_throttle, w.stall_misc, w.stall_no_instruction, w.stall_not_selected, w.stall_short_scoreboard, w.stall_sleeping, w.stall_tex_throttle, w.stall_wait, w.stall_gmma, w.stall_exec_dependency, w.stall_memory_throttle, w.stall_pipe_busy, w.stall_sync, w.stall_other
FROM (SELECT s.run_id, s.layer_id, s.phase,
       MAX(CASE WHEN s.name = 'stall_barrier' THEN s.share END) AS stall_barrier,
       MAX(CASE WHEN s.name = 'stall_branch_resolving' THEN s.share END) AS stall_branch_resolving,
       MAX(CASE WHEN s.name = 'stall_dispatch_stall' THEN s.share END) AS stall_dispatch_stall,
       MAX(CASE WHEN s.name = 'stall_drain' THEN s.share END) AS stall_drain,
       MAX(CASE WHEN s.name = 'stall_imc_miss' THEN s.share END) AS stall_imc_miss,
       MAX(CASE WHEN s.name = 'stall_lg_throttle' THEN s.share END) AS stall_lg_throttle,
       MAX(CASE WHEN s.name = 'stall_long_scoreboard' THEN s.share END) AS stall_long_scoreboard,
       MAX(CASE WHEN s.name = 'stall_math_pipe_throttle' THEN s.share END) AS stall_math_pipe_throttle,
       MAX(CASE WHEN s.name = 'stall_membar' THEN s.share END) AS stall_membar,
       MAX(CASE WHEN s.name = 'stall_mio_throttle' THEN s.share END) AS stall_mio_throttle,
       MAX(CASE WHEN s.name = 'stall_misc' THEN s.share END) AS stall_misc,
       MAX(CASE WHEN s.name = 'stall_no_instruction' THEN s.share END) AS stall_no_instruction,
       MAX(CASE WHEN s.name = 'stall_not_selected' THEN s.share END) AS stall_not_selected,
       MAX(CASE WHEN s.name = 'stall_short_scoreboard' THEN s.share END) AS stall_short_scoreboard,
       MAX(CASE WHEN s.name = 'stall_sleeping' THEN s.share END) AS stall_sleeping,
       MAX(CASE WHEN s.name = 'stall_tex_throttle' THEN s.share END) AS stall_tex_throttle,
       MAX(CASE WHEN s.name = 'stall_wait' THEN s.share END) AS stall_wait,
       MAX(CASE WHEN s.name = 'stall_gmma' THEN s.share END) AS stall_gmma,
       MAX(CASE WHEN s.name = 'stall_exec_dependency' THEN s.share END) AS stall_exec_dependency,
       MAX(CASE WHEN s.name = 'stall_memory_throttle' THEN s.share END) AS stall_memory_throttle,
       MAX(CASE WHEN s.name = 'stall_pipe_busy' THEN s.share END) AS stall_pipe_busy,
       MAX(CASE WHEN s.name = 'stall_sync' THEN s.share END) AS stall_sync,
       MAX(CASE WHEN s.name = 'stall_other' THEN s.share END) AS stall_other
      FROM rollup_stall s GROUP BY s.run_id, s.layer_id, s.phase) w
JOIN layer l ON l.run_id = w.run_id AND l.layer_id = w.layer_id
LEFT JOIN rollup_stall_category c1 ON c1.run_id = w.run_id AND c1.layer_id = w.layer_id AND c1.phase = w.phase
                                  AND c1.place = 1
LEFT JOIN rollup_stall_category c2 ON c2.run_id = w.run_id AND c2.layer_id = w.layer_id AND c2.phase = w.phase
                                  AND c2.place = 2
) v
ORDER BY v.run_id, v.layer_id, CASE v.phase WHEN 'fwd' THEN 0 WHEN 'bwd_data' THEN 1 WHEN 'bwd_weight' THEN 2 END;

-- Per run, layer and phase: L1/TEX and L2 hit rates in %, each averaged over the layer's launches weighted by the sectors it is a rate of (under ncu's default --cache-control all, cold caches).
CREATE VIEW cache_hit_rate AS
SELECT * FROM (
SELECT w.run_id, w.layer_id, l.name AS layer, l.kind, w.phase, w.l1_hit_rate, w.l1_global_load_hit_rate, w.l2_hit_rate, w.l2_read_hit_rate, w.l2_write_hit_rate
FROM (SELECT s.run_id, s.layer_id, s.phase,
       MAX(CASE WHEN s.name = 'l1_hit_rate' THEN s.value END) AS l1_hit_rate,
       MAX(CASE WHEN s.name = 'l1_global_load_hit_rate' THEN s.value END) AS l1_global_load_hit_rate,
       MAX(CASE WHEN s.name = 'l2_hit_rate' THEN s.value END) AS l2_hit_rate,
       MAX(CASE WHEN s.name = 'l2_read_hit_rate' THEN s.value END) AS l2_read_hit_rate,
       MAX(CASE WHEN s.name = 'l2_write_hit_rate' THEN s.value END) AS l2_write_hit_rate
      FROM rollup_metric s GROUP BY s.run_id, s.layer_id, s.phase) w
JOIN layer l ON l.run_id = w.run_id AND l.layer_id = w.layer_id
LEFT JOIN prediction p ON p.run_id = w.run_id AND p.layer_id = w.layer_id AND p.phase = w.phase
) v
ORDER BY v.run_id, v.layer_id, CASE v.phase WHEN 'fwd' THEN 0 WHEN 'bwd_data' THEN 1 WHEN 'bwd_weight' THEN 2 END;

-- Per run, layer and phase: requests, sectors and bytes per memory level (L1/TEX global and local, shared, L2, DRAM), throughput in bytes per second of kernel time, and % of each level's peak.
CREATE VIEW memory_traffic AS
SELECT * FROM (
SELECT w.run_id, w.layer_id, l.name AS layer, l.kind, w.phase, w.l1_global_load_requests, w.l1_global_load_sectors, w.l1_global_store_requests,
       w.l1_global_store_sectors, w.l1_local_load_sectors, w.l1_local_store_sectors, w.l1_bytes,
       w.shared_load_wavefronts, w.shared_store_wavefronts, w.shared_load_bank_conflicts,
       w.shared_store_bank_conflicts, w.shared_bytes, w.l2_read_sectors, w.l2_write_sectors, w.l2_bytes,
       w.dram_read_sectors, w.dram_write_sectors, w.dram_read_bytes, w.dram_write_bytes,
       CASE WHEN w.duration_ns > 0 THEN w.l1_bytes / (w.duration_ns * 1.0e-9) END AS l1_bytes_per_s, CASE WHEN w.duration_ns > 0 THEN w.shared_bytes / (w.duration_ns * 1.0e-9) END AS shared_bytes_per_s,
       CASE WHEN w.duration_ns > 0 THEN w.l2_bytes / (w.duration_ns * 1.0e-9) END AS l2_bytes_per_s,
       CASE WHEN w.duration_ns > 0 THEN (w.dram_read_bytes + w.dram_write_bytes) / (w.duration_ns * 1.0e-9) END AS dram_bytes_per_s,
       w.l1_throughput_pct, w.shared_throughput_pct, w.l2_throughput_pct, w.dram_throughput_pct
FROM (SELECT s.run_id, s.layer_id, s.phase,
       MAX(CASE WHEN s.name = 'duration_ns' THEN s.value END) AS duration_ns,
       MAX(CASE WHEN s.name = 'l1_global_load_requests' THEN s.value END) AS l1_global_load_requests,
       MAX(CASE WHEN s.name = 'l1_global_load_sectors' THEN s.value END) AS l1_global_load_sectors,
       MAX(CASE WHEN s.name = 'l1_global_store_requests' THEN s.value END) AS l1_global_store_requests,
       MAX(CASE WHEN s.name = 'l1_global_store_sectors' THEN s.value END) AS l1_global_store_sectors,
       MAX(CASE WHEN s.name = 'l1_local_load_sectors' THEN s.value END) AS l1_local_load_sectors,
       MAX(CASE WHEN s.name = 'l1_local_store_sectors' THEN s.value END) AS l1_local_store_sectors,
       MAX(CASE WHEN s.name = 'l1_bytes' THEN s.value END) AS l1_bytes,
       MAX(CASE WHEN s.name = 'shared_load_wavefronts' THEN s.value END) AS shared_load_wavefronts,
       MAX(CASE WHEN s.name = 'shared_store_wavefronts' THEN s.value END) AS shared_store_wavefronts,
       MAX(CASE WHEN s.name = 'shared_load_bank_conflicts' THEN s.value END) AS shared_load_bank_conflicts,
       MAX(CASE WHEN s.name = 'shared_store_bank_conflicts' THEN s.value END) AS shared_store_bank_conflicts,
       MAX(CASE WHEN s.name = 'shared_bytes' THEN s.value END) AS shared_bytes,
       MAX(CASE WHEN s.name = 'l2_read_sectors' THEN s.value END) AS l2_read_sectors,
       MAX(CASE WHEN s.name = 'l2_write_sectors' THEN s.value END) AS l2_write_sectors,
       MAX(CASE WHEN s.name = 'l2_bytes' THEN s.value END) AS l2_bytes,
       MAX(CASE WHEN s.name = 'dram_read_sectors' THEN s.value END) AS dram_read_sectors,
       MAX(CASE WHEN s.name = 'dram_write_sectors' THEN s.value END) AS dram_write_sectors,
       MAX(CASE WHEN s.name = 'dram_read_bytes' THEN s.value END) AS dram_read_bytes,
       MAX(CASE WHEN s.name = 'dram_write_bytes' THEN s.value END) AS dram_write_bytes,
       MAX(CASE WHEN s.name = 'l1_throughput_pct' THEN s.value END) AS l1_throughput_pct,
       MAX(CASE WHEN s.name = 'shared_throughput_pct' THEN s.value END) AS shared_throughput_pct,
       MAX(CASE WHEN s.name = 'l2_throughput_pct' THEN s.value END) AS l2_throughput_pct,
       MAX(CASE WHEN s.name = 'dram_throughput_pct' THEN s.value END) AS dram_throughput_pct
      FROM rollup_metric s GROUP BY s.run_id, s.layer_id, s.phase) w
JOIN layer l ON l.run_id = w.run_id AND l.layer_id = w.layer_id
LEFT JOIN prediction p ON p.run_id = w.run_id AND p.layer_id = w.layer_id AND p.phase = w.phase
) v
ORDER BY v.run_id, v.layer_id, CASE v.phase WHEN 'fwd' THEN 0 WHEN 'bwd_data' THEN 1 WHEN 'bwd_weight' THEN 2 END;

-- Per run, layer and phase: FP32 add, multiply and FMA thread instructions, all FP32 instructions, FLOPs = fadd + fmul + 2 ffma against the model's ops, and achieved FLOP/s.
CREATE VIEW fp_instructions AS
SELECT * FROM (
SELECT w.run_id, w.layer_id, l.name AS layer, l.kind, w.phase, w.fadd, w.fmul, w.ffma, w.fp32_inst, COALESCE(w.fp32_flops, COALESCE(w.fadd, 0) + COALESCE(w.fmul, 0) + 2 * COALESCE(w.ffma, 0)) AS flops, p.ops AS model_ops,
       CASE WHEN p.ops > 0 THEN COALESCE(w.fp32_flops, COALESCE(w.fadd, 0) + COALESCE(w.fmul, 0) + 2 * COALESCE(w.ffma, 0)) * 1.0 / p.ops END AS flops_per_model_op, CASE WHEN w.duration_ns > 0 THEN COALESCE(w.fp32_flops, COALESCE(w.fadd, 0) + COALESCE(w.fmul, 0) + 2 * COALESCE(w.ffma, 0)) / (w.duration_ns * 1.0e-9) END AS flops_per_s
FROM (SELECT s.run_id, s.layer_id, s.phase,
       MAX(CASE WHEN s.name = 'duration_ns' THEN s.value END) AS duration_ns,
       MAX(CASE WHEN s.name = 'fadd' THEN s.value END) AS fadd,
       MAX(CASE WHEN s.name = 'fmul' THEN s.value END) AS fmul,
       MAX(CASE WHEN s.name = 'ffma' THEN s.value END) AS ffma,
       MAX(CASE WHEN s.name = 'fp32_flops' THEN s.value END) AS fp32_flops,
       MAX(CASE WHEN s.name = 'fp32_inst' THEN s.value END) AS fp32_inst
      FROM rollup_metric s GROUP BY s.run_id, s.layer_id, s.phase) w
JOIN layer l ON l.run_id = w.run_id AND l.layer_id = w.layer_id
LEFT JOIN prediction p ON p.run_id = w.run_id AND p.layer_id = w.layer_id AND p.phase = w.phase
) v
ORDER BY v.run_id, v.layer_id, CASE v.phase WHEN 'fwd' THEN 0 WHEN 'bwd_data' THEN 1 WHEN 'bwd_weight' THEN 2 END;

-- Per run, layer and phase: occupancy, SM efficiency, IPC, issue slots, eligible warps, warp execution efficiency, pipe utilization (FMA, ALU, LSU, XU) and compute/memory throughput, in %.
CREATE VIEW utilization AS
SELECT * FROM (
SELECT w.run_id, w.layer_id, l.name AS layer, l.kind, w.phase, w.achieved_occupancy, w.sm_efficiency, w.ipc, w.issue_slot_pct, w.eligible_warps,
       w.warp_execution_efficiency, w.fma_pipe_pct, w.alu_pipe_pct, w.lsu_pipe_pct, w.xu_pipe_pct,
       w.sm_throughput_pct, w.memory_throughput_pct
FROM (SELECT s.run_id, s.layer_id, s.phase,
       MAX(CASE WHEN s.name = 'achieved_occupancy' THEN s.value END) AS achieved_occupancy,
       MAX(CASE WHEN s.name = 'sm_efficiency' THEN s.value END) AS sm_efficiency,
       MAX(CASE WHEN s.name = 'ipc' THEN s.value END) AS ipc,
       MAX(CASE WHEN s.name = 'issue_slot_pct' THEN s.value END) AS issue_slot_pct,
       MAX(CASE WHEN s.name = 'eligible_warps' THEN s.value END) AS eligible_warps,
       MAX(CASE WHEN s.name = 'warp_execution_efficiency' THEN s.value END) AS warp_execution_efficiency,
       MAX(CASE WHEN s.name = 'fma_pipe_pct' THEN s.value END) AS fma_pipe_pct,
       MAX(CASE WHEN s.name = 'alu_pipe_pct' THEN s.value END) AS alu_pipe_pct,
       MAX(CASE WHEN s.name = 'lsu_pipe_pct' THEN s.value END) AS lsu_pipe_pct,
       MAX(CASE WHEN s.name = 'xu_pipe_pct' THEN s.value END) AS xu_pipe_pct,
       MAX(CASE WHEN s.name = 'sm_throughput_pct' THEN s.value END) AS sm_throughput_pct,
       MAX(CASE WHEN s.name = 'memory_throughput_pct' THEN s.value END) AS memory_throughput_pct
      FROM rollup_metric s GROUP BY s.run_id, s.layer_id, s.phase) w
JOIN layer l ON l.run_id = w.run_id AND l.layer_id = w.layer_id
LEFT JOIN prediction p ON p.run_id = w.run_id AND p.layer_id = w.layer_id AND p.phase = w.phase
) v
ORDER BY v.run_id, v.layer_id, CASE v.phase WHEN 'fwd' THEN 0 WHEN 'bwd_data' THEN 1 WHEN 'bwd_weight' THEN 2 END;

-- Per run, layer and phase: achieved FP32 FLOP/s and arithmetic intensity (FLOPs per byte) at L1 (local/global writeback x 128 B), L2 (L2-to-L1 reads) and DRAM, against the peaks ncu measures (per-cycle peak x the clock during the run), as ncu's hierarchical roofline does.
CREATE VIEW roofline AS
SELECT * FROM (
SELECT w.run_id, w.layer_id, l.name AS layer, l.kind, w.phase, COALESCE(w.fp32_flops, COALESCE(w.fadd, 0) + COALESCE(w.fmul, 0) + 2 * COALESCE(w.ffma, 0)) AS flops, CASE WHEN w.duration_ns > 0 THEN COALESCE(w.fp32_flops, COALESCE(w.fadd, 0) + COALESCE(w.fmul, 0) + 2 * COALESCE(w.ffma, 0)) / (w.duration_ns * 1.0e-9) END AS flops_per_s,
       CASE WHEN (128 * w.l1_lg_writeback_cycles) > 0 THEN COALESCE(w.fp32_flops, COALESCE(w.fadd, 0) + COALESCE(w.fmul, 0) + 2 * COALESCE(w.ffma, 0)) * 1.0 / (128 * w.l1_lg_writeback_cycles) END AS l1_intensity,
       CASE WHEN w.l2_to_l1_read_bytes > 0 THEN COALESCE(w.fp32_flops, COALESCE(w.fadd, 0) + COALESCE(w.fmul, 0) + 2 * COALESCE(w.ffma, 0)) * 1.0 / w.l2_to_l1_read_bytes END AS l2_intensity,
       CASE WHEN (w.dram_read_bytes + w.dram_write_bytes) > 0 THEN COALESCE(w.fp32_flops, COALESCE(w.fadd, 0) + COALESCE(w.fmul, 0) + 2 * COALESCE(w.ffma, 0)) * 1.0 / (w.dram_read_bytes + w.dram_write_bytes) END AS dram_intensity,
       2 * w.ffma_peak_per_cycle * w.sm_clock_hz AS peak_flops_per_s,
       128 * w.l1_lg_writeback_peak_per_cycle * w.l1_clock_hz AS l1_peak_bytes_per_s,
       w.l2_to_l1_bytes_peak_per_cycle * w.l2_clock_hz AS l2_peak_bytes_per_s,
       w.dram_bytes_peak_per_cycle * w.dram_clock_hz AS dram_peak_bytes_per_s,
       p.intensity AS model_intensity
FROM (SELECT s.run_id, s.layer_id, s.phase,
       MAX(CASE WHEN s.name = 'duration_ns' THEN s.value END) AS duration_ns,
       MAX(CASE WHEN s.name = 'fadd' THEN s.value END) AS fadd,
       MAX(CASE WHEN s.name = 'fmul' THEN s.value END) AS fmul,
       MAX(CASE WHEN s.name = 'ffma' THEN s.value END) AS ffma,
       MAX(CASE WHEN s.name = 'fp32_flops' THEN s.value END) AS fp32_flops,
       MAX(CASE WHEN s.name = 'l1_lg_writeback_cycles' THEN s.value END) AS l1_lg_writeback_cycles,
       MAX(CASE WHEN s.name = 'l2_to_l1_read_bytes' THEN s.value END) AS l2_to_l1_read_bytes,
       MAX(CASE WHEN s.name = 'dram_read_bytes' THEN s.value END) AS dram_read_bytes,
       MAX(CASE WHEN s.name = 'dram_write_bytes' THEN s.value END) AS dram_write_bytes,
       MAX(CASE WHEN s.name = 'ffma_peak_per_cycle' THEN s.value END) AS ffma_peak_per_cycle,
       MAX(CASE WHEN s.name = 'sm_clock_hz' THEN s.value END) AS sm_clock_hz,
       MAX(CASE WHEN s.name = 'l1_lg_writeback_peak_per_cycle' THEN s.value END) AS l1_lg_writeback_peak_per_cycle,
       MAX(CASE WHEN s.name = 'l1_clock_hz' THEN s.value END) AS l1_clock_hz,
       MAX(CASE WHEN s.name = 'l2_to_l1_bytes_peak_per_cycle' THEN s.value END) AS l2_to_l1_bytes_peak_per_cycle,
       MAX(CASE WHEN s.name = 'l2_clock_hz' THEN s.value END) AS l2_clock_hz,
       MAX(CASE WHEN s.name = 'dram_bytes_peak_per_cycle' THEN s.value END) AS dram_bytes_peak_per_cycle,
       MAX(CASE WHEN s.name = 'dram_clock_hz' THEN s.value END) AS dram_clock_hz
      FROM rollup_metric s GROUP BY s.run_id, s.layer_id, s.phase) w
JOIN layer l ON l.run_id = w.run_id AND l.layer_id = w.layer_id
LEFT JOIN prediction p ON p.run_id = w.run_id AND p.layer_id = w.layer_id AND p.phase = w.phase
) v
ORDER BY v.run_id, v.layer_id, CASE v.phase WHEN 'fwd' THEN 0 WHEN 'bwd_data' THEN 1 WHEN 'bwd_weight' THEN 2 END;
