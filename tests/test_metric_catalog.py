"""The metric catalog: every ncu name exists on a real listing, and the catalog agrees with itself."""

from __future__ import annotations

import pytest
from profiler_samples import DATA, read

from tracker import metrics as catalog
from tracker.profilers import ncu, ncu_csv, nvprof


def test_every_ncu_name_exists_on_a_real_sm86_listing():
    known = ncu.parse_query_metrics(read("ncu-query-metrics-rtx3080-sm86.txt"))
    assert len(known) > 1700 and "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active" in known
    missing = [s.name for s in ncu.SOURCES.all if s.requested and s.min_cc <= 8.6 and s.base not in known]
    assert missing == []


def test_every_ncu_name_for_sm90_exists_on_a_real_h100_listing():
    """ncu 2025.3's --query-metrics on the H100 we profiled (tools/gpu_stage.sh 1, 2026-11-22)."""
    known = ncu.parse_query_metrics(read("ncu-query-metrics-h100-sm90.txt"))
    assert len(known) > 3000 and "smsp__average_warps_issue_stalled_gmma_per_issue_active" in known
    wanted = ncu.SOURCES.requested(9.0)
    assert len(wanted) == 80 and [m for m in wanted if m.split(".", 1)[0] not in known] == []
    assert "l1tex__lsu_writeback_active_mem_lg" not in known  # hence max_cc 8.9: no L1 roofline on sm_90 yet


def test_catalog_is_consistent():
    names = [m.name for m in catalog.CATALOG]
    assert len(names) == len(set(names))
    for m in catalog.CATALOG:
        assert m.name in ncu.SOURCES.by_metric or m.name in nvprof.SOURCES.by_metric, m.name  # some collector's
        if m.rollup.startswith("weighted:"):
            assert m.rollup.removeprefix("weighted:") in catalog.BY_NAME, m.name
        else:
            assert m.rollup in ("sum", "max"), m.name
    stalls = [m for m in catalog.CATALOG if m.family == "stall"]
    nvprof_stalls = {
        "stall_constant_memory_dependency",
        "stall_exec_dependency",
        "stall_inst_fetch",
        "stall_memory_dependency",
        "stall_memory_throttle",
        "stall_not_selected",
        "stall_other",
        "stall_pipe_busy",
        "stall_sleeping",
        "stall_sync",
        "stall_texture",
    }
    assert {
        nvprof.SOURCES.by_metric[m.name].name for m in stalls if m.name in nvprof.SOURCES.by_metric
    } == nvprof_stalls  # every nvprof reason on Volta is mapped
    assert {f"stall_{m.category}" for m in stalls} == nvprof_stalls  # ... and names a paper-003 category


def test_the_catalog_says_why_an_l2_hit_rate_can_exceed_100_percent():
    """What `tracker metrics l2_hit_rate` and every new store's metric_def show."""
    rows = {r["name"]: r["description"] for r in catalog.metric_def_rows()}
    note = rows["l2_hit_rate"]
    assert "not clamped" in note and "exceed 100 %" in note and "different replay passes" in note
    assert "https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html#range-and-precision" in note
    assert "counts a store as a hit" in rows["l2_write_hit_rate"] and "l2_hit_rate" in rows["l2_write_hit_rate"]


def test_l2_hit_rates_over_100_percent_are_ncus_own_in_the_h100_recording():
    """The batch-16 H100 recording and ncu's own CSV export of the same report: the L2 hit rate
    exceeds 100 % in four launches, and the recording shows the catalog's cause, L2 counts of one
    launch taken in different replay passes that disagree (read + write sectors above all sectors)."""
    import sqlite3
    from contextlib import closing

    over = {
        "fc8/bwd_weight/gemm_tn": 102.24,
        "fc7/bwd_weight/gemm_tn": 100.88,
        "fc6/bwd_weight/gemm_tn": 100.41,
        "conv5/bwd_data/conv2d_bwd_data_implicit": 100.25,
    }
    exported = {p.kernel: p for p in ncu_csv.parse(read("ncu-raw-nvtx-h100-sm90-ncu2025.3-alexnet-b16.csv"))}
    assert {k: p.metrics["l2_hit_rate"] for k, p in exported.items() if p.metrics["l2_hit_rate"] > 100} == over
    assert all(p.values["profiler__replayer_passes"] == 18 for p in exported.values())
    conv5 = exported["conv5/bwd_data/conv2d_bwd_data_implicit"].metrics
    assert conv5["l2_read_sectors"] + conv5["l2_write_sectors"] > 1.04 * conv5["l2_sectors"]
    assert conv5["l2_read_sectors"] > conv5["l2_sectors"]  # a part above its whole: two passes
    db = DATA.parent / "alexnet-b16-nvidia-h100-80gb-hbm3.db"
    with closing(sqlite3.connect(f"file:{db}?immutable=1", uri=True)) as conn:  # immutable: writes nothing
        stored = conn.execute(
            "SELECT y.name || '/' || l.phase || '/' || l.kernel_name, m.value FROM metric m "
            "JOIN launch l USING (run_id, invocation) JOIN layer y ON y.run_id = l.run_id AND y.layer_id = l.layer_id "
            "WHERE m.name = 'l2_hit_rate' AND m.value > 100"
        ).fetchall()
    assert dict(stored) == pytest.approx(over)


def test_ncu_metric_list_depends_on_the_gpu():
    volta, ampere, hopper = (ncu.SOURCES.requested(cc) for cc in (7.0, 8.6, 9.0))
    assert "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio" in set(hopper) - set(volta)
    writeback = "l1tex__lsu_writeback_active_mem_lg.sum"  # CC 7.5 to 8.9: listed for an RTX 3080, not an H100
    assert writeback in set(ampere) - set(volta) - set(hopper)
    assert "profiler__replayer_passes" not in hopper  # reported unasked; asking would fail
