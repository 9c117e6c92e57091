"""The counter views on a store filled from real profiler output, on SQLite and PostgreSQL.

No trace of our own kernels has been recorded yet (no GPU so far), so this store is built from
the public Tesla K20c nvprof sample (tests/data/ncu): its 12 launches (4 kernels x 3 iterations,
durations from the GPU trace, counters from the metrics run) are assigned, for the test only, to
AlexNet's first four layers, forward. A second store holds the one kernel of the public V100
excerpt (stalls, hit rates, FP counts) as conv2 forward. Both are built in tests/samples.py. The
figures below are computed by hand from those files.
"""

from __future__ import annotations

import statistics

import pytest
from samples import LAYERS, sample_store, v100_sample_store

from tracker.model import predict
from tracker.nets import build
from tracker.store import open_store, run_sql


def query(db: str, sql: str) -> list[dict]:
    columns, rows = run_sql(open_store(db, write=False), sql)
    return [dict(zip(columns, row)) for row in rows]


@pytest.fixture
def sample(db):
    return db, sample_store(db)


def test_median_and_spread_over_repeats(sample):
    db, run_id = sample
    (row,) = query(db, f"SELECT * FROM layer_metric WHERE run_id = {run_id} AND layer_id = 1 AND name = 'duration_ns'")
    durations = [7.922282e6, 7.924363e6, 7.924203e6]  # conv1 = forma_kernel 0, in the GPU trace
    assert row["value"] == pytest.approx(statistics.median(durations))
    assert row["repeats"] == 3 and row["min_value"] == pytest.approx(7.922282e6)
    assert row["spread_pct"] == pytest.approx(100 * (7.924363 - 7.922282) / 7.924203)


def test_stall_breakdown_has_a_row_per_layer_and_phase(sample):
    db, run_id = sample
    rows = query(db, f"SELECT * FROM stall_breakdown WHERE run_id = {run_id} ORDER BY layer_id")
    assert [(r["layer"], r["phase"]) for r in rows] == [(name, "fwd") for name in LAYERS]
    relu1 = rows[1]  # forma_kernel 1: sync 0 %, exec 17.855091 %, memory 23.316966 %
    total = 17.855091 + 23.316966
    assert relu1["stall_long_scoreboard"] == pytest.approx(23.316966 / total)
    assert relu1["stall_exec_dependency"] == pytest.approx(17.855091 / total)
    assert relu1["stall_sync"] == 0 and relu1["stall_wait"] is None
    assert (relu1["first_reason"], relu1["second_reason"]) == ("memory_dependency", "exec_dependency")
    assert relu1["first_share"] == pytest.approx(23.316966 / total)


def test_fp_utilization_and_traffic(sample):
    db, run_id = sample
    fp = query(db, f"SELECT * FROM fp_instructions WHERE run_id = {run_id} AND layer = 'conv1'")[0]
    ops = next(p.ops for p in predict(build("alexnet"), 1, phases="fwd") if p.layer == "conv1")
    assert fp["flops"] == 673_384_360 and fp["model_ops"] == ops
    assert fp["flops_per_model_op"] == pytest.approx(673_384_360 / ops)
    assert fp["flops_per_s"] == pytest.approx(673_384_360 / 7.924203e-3)
    use = query(db, f"SELECT * FROM utilization WHERE run_id = {run_id} AND layer = 'conv1'")[0]
    assert use["achieved_occupancy"] == pytest.approx(85.0643)  # nvprof's 0.850643
    assert use["warp_execution_efficiency"] == pytest.approx(99.819246)
    traffic = query(db, f"SELECT * FROM memory_traffic WHERE run_id = {run_id} AND layer = 'conv1'")[0]
    assert traffic["l1_global_load_sectors"] == 19_998_022 and traffic["l1_global_store_sectors"] == 4_209_678
    assert traffic["dram_bytes_per_s"] is None  # not collected by this sample


def test_the_v100_sample_fills_stalls_hit_rates_and_fp(db):
    run_id = v100_sample_store(db)
    (stall,) = query(db, f"SELECT * FROM stall_breakdown WHERE run_id = {run_id}")
    total = 47.62 + 22.52 + 25.9 + 1.12 + 0.05 + 0.87 + 1.42 + 0.5  # its nonzero stall_* percentages
    assert stall["layer"] == "conv2" and stall["first_reason"] == "inst_fetch"
    assert stall["first_share"] == pytest.approx(47.62 / total) and stall["second_reason"] == "memory_dependency"
    (hits,) = query(db, f"SELECT * FROM cache_hit_rate WHERE run_id = {run_id}")
    assert (hits["l1_hit_rate"], hits["l2_hit_rate"]) == (52.71, 24.81)
    (fp,) = query(db, f"SELECT * FROM fp_instructions WHERE run_id = {run_id}")
    assert fp["flops"] == 1_320_801_560 + 2 * 5.6236e10 and fp["flops_per_s"] is None  # no duration


def test_every_counter_view_answers(sample):
    db, run_id = sample
    for view in ("launch_metrics", "layer_summary", "cache_hit_rate", "roofline", "layer_metric_repeat"):
        assert query(db, f"SELECT * FROM {view} WHERE run_id = {run_id}"), view
    wide = query(db, f"SELECT * FROM launch_metrics WHERE run_id = {run_id} ORDER BY invocation")
    assert len(wide) == 12 and wide[0]["flops"] == 673_384_360 and wide[0]["kernel_name"].startswith("__kernel")
    summary = query(db, f"SELECT * FROM layer_summary WHERE run_id = {run_id} AND layer = 'conv1'")[0]
    assert summary["duration_ms"] == pytest.approx(7.924203)


def test_tracker_sql_help_names_every_view():
    """The help's list of views is written by hand: it names each view the store defines."""
    import click

    from tracker.cli.trace import sql
    from tracker.store.views import VIEWS

    help_text = " ".join(sql.get_help(click.Context(sql, info_name="sql")).split())
    assert [v.name for v in VIEWS if v.name not in help_text] == []
