-- tracker trace store, schema v1: views
-- Rendered from tracker/store/views.py by `python -m tracker.store.contract`; do not edit by hand.
-- Portable SQL: the same views run on SQLite and PostgreSQL.

-- Measured time per run, layer and phase: event time summed over the phase's launches and averaged over repeats (NULL where nothing was timed).
CREATE VIEW layer_time AS
SELECT run_id, layer_id, phase,
       COUNT(*) / COUNT(DISTINCT repeat) AS launches,
       SUM(time_ms) / COUNT(DISTINCT repeat) AS measured_ms
FROM launch
GROUP BY run_id, layer_id, phase;

-- One row per run, layer and phase: the model's prediction beside the measurement. achieved_gflops = model ops / measured time.
CREATE VIEW layer_phase AS
SELECT l.run_id, l.layer_id, l.name AS layer, l.kind, p.phase, l.output_shape, l.params,
       p.macs, p.ops, p.bytes, p.intensity, p.attainable_gflops, p.predicted_ms, p.bound,
       t.launches, t.measured_ms,
       CASE WHEN t.measured_ms > 0 THEN p.ops / (t.measured_ms * 1.0e6) END AS achieved_gflops
FROM layer l
JOIN prediction p ON p.run_id = l.run_id AND p.layer_id = l.layer_id
LEFT JOIN layer_time t ON t.run_id = p.run_id AND t.layer_id = p.layer_id AND t.phase = p.phase;

-- One row per run: settings, stored status (see `tracker runs` for runs whose process died), and totals over its layers.
CREATE VIEW run_summary AS
SELECT r.id AS run_id, r.status, r.network, r.batch, r.phases, r.backend, r.device_name,
       r.started_at, r.finished_at,
       (SELECT COUNT(*) FROM layer l WHERE l.run_id = r.id) AS layers,
       (SELECT COUNT(*) FROM launch k WHERE k.run_id = r.id) AS launches,
       (SELECT SUM(p.ops) FROM prediction p WHERE p.run_id = r.id) AS ops,
       (SELECT SUM(p.bytes) FROM prediction p WHERE p.run_id = r.id) AS bytes,
       (SELECT SUM(p.predicted_ms) FROM prediction p WHERE p.run_id = r.id) AS predicted_ms,
       (SELECT SUM(t.measured_ms) FROM layer_time t WHERE t.run_id = r.id) AS measured_ms,
       r.predicted_peak_bytes, r.measured_peak_bytes
FROM run r;
