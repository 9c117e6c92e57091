"""GPU idle between launches, on the public traces' real start times: the views' window sums checked
against the union of the launches' intervals worked out here, and against the trace file itself;
shown by `tracker show` and the report where a run has starts, and absent where it has none."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from samples import sample_store

from tracker.cli import cli
from tracker.importers import import_file
from tracker.nets import build
from tracker.phases import ORDER
from tracker.store import launch_rows, open_store, run_sql
from tracker.store.queries import idle_per_iteration
from tracker.store.views import IDLE_VIEWS

PUBLIC = Path(__file__).parent / "data" / "public"
ALEXNET = PUBLIC / "pytorch-alexnet-fwd-a100-kineto.json.gz"
RESNET = PUBLIC / "pytorch-resnet50-ddp-train-a100-kineto.json.gz"


def union_idle(intervals: list[tuple[int, int]]) -> tuple[int, int]:
    """(span, idle) of intervals: merged, the gaps between the merged pieces."""
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    span = merged[-1][1] - merged[0][0]
    return span, span - sum(end - start for start, end in merged)


@pytest.mark.parametrize("trace", [ALEXNET, RESNET], ids=["alexnet", "resnet50"])
def test_an_iterations_idle_is_its_span_less_the_union_of_its_launches(db, trace):
    run_id = import_file(db, trace)
    store = open_store(db, write=False)
    by_repeat: dict[int, list[tuple[int, int]]] = {}
    for k in launch_rows(store, run_id):
        by_repeat.setdefault(k["repeat"], []).append((k["start_ns"], k["start_ns"] + round(k["time_ms"] * 1e6)))
    _, rows = run_sql(store, f"SELECT repeat, span_ms, idle_ms FROM iteration_idle WHERE run_id = {run_id}")
    assert len(rows) == len(by_repeat) > 1
    for repeat, span_ms, idle_ms in rows:
        span, gaps = union_idle(by_repeat[repeat])
        assert (span_ms, idle_ms) == (pytest.approx(span / 1e6, abs=1e-9), pytest.approx(gaps / 1e6, abs=1e-9))
    _, sums = run_sql(
        store, f"SELECT repeat, SUM(idle_ms) FROM layer_idle WHERE run_id = {run_id} GROUP BY repeat ORDER BY repeat"
    )
    assert [s for _, s in sums] == [pytest.approx(idle_ms, abs=1e-9) for _, _, idle_ms in sorted(rows)]
    for view in IDLE_VIEWS:  # rows in key order, as every view lists them
        columns, keys = run_sql(store, f"SELECT {', '.join(view.order)} FROM {view.name} WHERE run_id = {run_id}")
        ordered = [tuple(ORDER[v] if c == "phase" else v for c, v in zip(columns, key)) for key in keys]
        assert ordered == sorted(ordered) and ordered, view.name


def test_the_measured_forwards_span_is_the_traces_own(tmp_path):
    """Mapped onto AlexNet, the measured forward (iteration 2) runs from its first kernel's start to
    its last one's end, as the trace's own kernel events inside the measured range say."""
    db = str(tmp_path / "t.db")
    run_id = import_file(db, ALEXNET, build("alexnet"), batch=128)
    events = json.loads(gzip.decompress(ALEXNET.read_bytes()))["traceEvents"]
    measured = [e for e in events if e.get("cat") == "user_annotation" and e["name"].endswith("measure|forward]")]
    inner = min(measured, key=lambda e: e["dur"])
    calls = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") == "cuda_runtime" and inner["ts"] <= e["ts"] <= inner["ts"] + inner["dur"]
    }
    kernels = [e for e in events if e.get("cat") == "kernel" and e["args"]["correlation"] in calls]
    first, last = min(e["ts"] for e in kernels), max(e["ts"] + e["dur"] for e in kernels)
    _, rows = run_sql(open_store(db, write=False), f"SELECT span_ms FROM iteration_idle WHERE run_id = {run_id}")
    assert rows[1][0] == pytest.approx((last - first) / 1e3, rel=1e-6)


def test_show_gives_the_idle_of_a_run_with_starts_and_says_nothing_of_one_without(runner, tmp_path):
    db = str(tmp_path / "t.db")
    with_starts = import_file(db, RESNET)
    without = sample_store(db)  # the public K20c nvprof sample: durations only
    shown = runner.invoke(cli, ["show", str(with_starts), "--db", db])
    assert shown.exit_code == 0 and "gpu_idle:" in shown.output and "idle (time)" in shown.output
    assert "between launches in each iteration, median of 3" in shown.output
    bare = runner.invoke(cli, ["show", str(without), "--db", db])
    assert bare.exit_code == 0 and "gpu_idle" not in bare.output and "idle (time)" not in bare.output
    as_json = json.loads(runner.invoke(cli, ["show", str(with_starts), "--db", db, "--format", "json"]).stdout)
    whole = idle_per_iteration(open_store(db, write=False), with_starts)
    assert as_json["gpu_idle"] == pytest.approx(whole) and whole is not None and 0 < whole["idle_pct"] < 100


@pytest.mark.slow  # draws the report's figures
def test_the_report_has_an_idle_section_where_the_run_has_starts(runner, tmp_path):
    db = str(tmp_path / "t.db")
    run_id = import_file(db, ALEXNET, build("alexnet"), batch=128)
    bare = sample_store(db)
    for run, expected in ((run_id, "the longest wait comes before"), (bare, "records no launch start times")):
        out = tmp_path / f"r{run}"
        done = runner.invoke(cli, ["report", str(run), "--db", db, "--out", str(out)])
        assert done.exit_code == 0, done.output
        assert expected in (out / "report.md").read_text()
