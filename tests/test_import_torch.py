"""`tracker import` of a PyTorch profiler trace: the public A100 traces (tests/data/public/SOURCES.md),
each stored launch checked against what the file says, read here with nothing but ``json``: which
kernels, copies and fills ran, in what order, with what geometry, duration and start, and inside
which operator's span (forward) or autograd node's span (backward) each was launched."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from timelines import check, exported

from tracker.cli import cli
from tracker.nets import build
from tracker.store import find_run, open_store, run_dict, run_sql

PUBLIC = Path(__file__).parent / "data" / "public"
ALEXNET = PUBLIC / "pytorch-alexnet-fwd-a100-kineto.json.gz"  # PARAM's AlexNet forward, warm-up and measured
RESNET = PUBLIC / "pytorch-resnet50-ddp-train-a100-kineto.json.gz"  # three DDP training steps of a ResNet-50


def events(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def device_work(path: Path) -> list[dict]:
    """The kernels, copies and fills, in the order the host launched them, each with its launch call."""
    found = events(path)
    calls = {e["args"]["correlation"]: e for e in found if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    work = [e for e in found if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    for e in work:
        e["call"] = calls[e["args"]["correlation"]]
    return sorted(work, key=lambda e: (e["call"]["ts"], e["args"]["correlation"]))


def launched_in(span: dict, work: list[dict]) -> list[int]:
    """The kernels launched, on the span's thread, while it was open: their places in launch order."""
    return [
        i
        for i, e in enumerate(work)
        if e["call"]["tid"] == span["tid"] and span["ts"] <= e["call"]["ts"] <= span["ts"] + span["dur"]
    ]


def imported(runner, tmp_path: Path, path: Path, *args: str) -> tuple[str, int]:
    db = str(tmp_path / "t.db")
    done = runner.invoke(cli, ["import", str(path), "--db", db, "--format", "json", *args])
    assert done.exit_code == 0, done.output
    return db, json.loads(done.stdout)[0]["run_id"]


def stored(db: str, run_id: int, where: str = "1 = 1") -> list[tuple]:
    _, rows = run_sql(
        open_store(db, write=False),
        "SELECT k.invocation, k.kernel_name, k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z, "
        "k.registers, k.shared_bytes, k.time_ms, k.start_ns, l.name, k.phase, k.repeat FROM launch k JOIN layer l "
        f"ON l.run_id = k.run_id AND l.layer_id = k.layer_id WHERE k.run_id = {run_id} AND {where} "
        "ORDER BY k.invocation",
    )
    return rows


def test_every_kernel_copy_and_fill_is_a_launch_with_the_traces_own_figures(runner, tmp_path):
    db, run_id = imported(runner, tmp_path, ALEXNET)
    work = device_work(ALEXNET)
    origin = min(e["ts"] for e in work)  # integer µs in this file: exact
    expected = [
        (
            i,
            e["name"],
            *(list(e["args"].get("grid", [0, 0, 0])) + [1, 1])[:3],
            *(list(e["args"].get("block", [0, 0, 0])) + [1, 1])[:3],
            e["args"].get("registers per thread"),
            int(e["args"].get("shared memory") or 0),
            e["dur"] / 1e3,
            (e["ts"] - origin) * 1000,
        )
        for i, e in enumerate(work)
    ]
    assert [row[:12] for row in stored(db, run_id)] == expected and len(expected) == 98
    run = run_dict(find_run(open_store(db, write=False), run_id))
    assert (run["implementation"], run["backend"]) == ("imported", "events")
    assert run["device_name"] == "NVIDIA A100-PG509-200"
    assert (run["compute_capability"], run["sm_count"], run["repeat"]) == ("8.0", 108, 2)
    assert run["library"]["format"] == "pytorch-trace" and "predictions blank" in run["backend_reason"]


def test_each_operator_call_is_the_layer_of_its_kind_and_number_in_a_tracker_network(runner, tmp_path):
    """PARAM's AlexNet calls aten::conv2d, relu_, max_pool2d and linear in torchvision's order: the
    k-th call of a kind inside the measured forward's range ran the k-th layer of that kind of
    tracker's AlexNet, in the second iteration (the warm-up forward is the first)."""
    db, run_id = imported(runner, tmp_path, ALEXNET, "--network", "alexnet", "--batch", "128")
    found = events(ALEXNET)
    work = device_work(ALEXNET)
    measured = min(  # PARAM opens the range twice, one inside the other; the inner one holds the forward
        (e for e in found if e.get("cat") == "user_annotation" and e["name"].endswith("measure|forward]")),
        key=lambda e: e["dur"],
    )
    end = measured["ts"] + measured["dur"]
    inside = sorted(
        (e for e in found if e.get("cat") == "cpu_op" and measured["ts"] <= e["ts"] <= end), key=lambda e: e["ts"]
    )
    kinds = {"aten::conv2d": "conv", "aten::relu_": "relu", "aten::max_pool2d": "maxpool", "aten::linear": "linear"}
    layers = build("alexnet").layers
    checked = 0
    for operator, kind in kinds.items():
        calls = [e for e in inside if e["name"] == operator]
        names = [layer.name for layer in layers if layer.kind == kind]
        assert len(calls) == len(names)
        for call, name in zip(calls, names):
            kernels = [row[1] for row in stored(db, run_id, f"l.name = '{name}' AND k.repeat = 1")]
            assert kernels == [work[i]["name"] for i in launched_in(call, work)] and kernels, name
            checked += 1
    assert checked == 18
    run = run_dict(find_run(open_store(db, write=False), run_id))
    kept = len(stored(db, run_id))
    assert run["library"]["outside"]["launches"] == len(work) - kept > 0  # input copies, dropout, the average pool
    _, rows = run_sql(
        open_store(db, write=False), f"SELECT layer, predicted_ms FROM layer_phase WHERE run_id = {run_id}"
    )
    assert all(ms is None or ms > 0 for _, ms in rows) and len(rows) == len(layers)


def test_a_backward_node_runs_in_the_layer_of_the_forward_call_that_made_it(runner, tmp_path):
    """Every ConvolutionBackward0 node of the three ResNet-50 steps: the kernels launched while it
    ran are stored in the backward (whole, as bwd_data) of the layer whose forward kernels the
    aten::conv2d of the same sequence number launched."""
    db, run_id = imported(runner, tmp_path, RESNET)
    found = events(RESNET)
    work = device_work(RESNET)
    forward = {
        e["args"]["Sequence number"]: e for e in found if e.get("cat") == "cpu_op" and e["name"] == "aten::conv2d"
    }
    nodes = [e for e in found if e.get("name") == "autograd::engine::evaluate_function: ConvolutionBackward0"]
    placed: dict[tuple, list[int]] = {}  # (layer, phase, iteration) -> its launches' invocations
    for row in stored(db, run_id):
        placed.setdefault((row[12], row[13], row[14]), []).append(row[0])
    where = {tuple(invocations): key for key, invocations in placed.items()}
    for node in nodes:
        layer, phase, repeat = where[tuple(launched_in(forward[node["args"]["Sequence number"]], work))]
        assert layer.startswith("aten::conv2d#") and phase == "fwd"
        assert placed[layer, "bwd_data", repeat] == launched_in(node, work), layer
    assert len(nodes) == 159 and len({key[0] for key in placed if key[0].startswith("aten::conv2d#")}) == 53
    _, conventions = run_sql(
        open_store(db, write=False), f"SELECT DISTINCT convention FROM prediction WHERE run_id = {run_id}"
    )
    assert len(conventions) == 1 and "no model of this layer" in conventions[0][0]


@pytest.mark.parametrize("fmt", ["perfetto", "chrome"])
def test_an_imported_trace_exports_its_real_starts_with_overlaps_beside(fmt, runner, tmp_path):
    """DDP's NCCL kernels run on their own stream beside the backward: they go to lanes beside it."""
    pytest.importorskip("perfetto") if fmt == "perfetto" else None
    db, run_id = imported(runner, tmp_path, RESNET)
    found = exported(runner, db, str(run_id), fmt, tmp_path)
    check(found[1], open_store(db, write=False), run_id)
    assert len(found[1]["tracks"]) > 1


def test_an_imported_forward_compares_with_the_forward_of_a_training_run(runner, tmp_path):
    import shutil

    db = tmp_path / "t.db"
    shutil.copyfile(Path(__file__).parent / "data" / "alexnet-b128-ncu-nvidia-h100-80gb-hbm3.db", db)
    _, run_id = imported(runner, tmp_path, ALEXNET, "--network", "alexnet", "--batch", "128")
    refused = runner.invoke(cli, ["compare", "1", str(run_id), "--db", str(db)])
    assert refused.exit_code == 1 and "--phases fwd" in refused.output
    done = runner.invoke(cli, ["compare", "1", str(run_id), "--db", str(db), "--phases", "fwd", "--format", "json"])
    assert done.exit_code == 0, done.output
    rows = {row["layer"]: row for row in json.loads(done.stdout)}
    assert set(rows) == {layer.name for layer in build("alexnet").layers} | {"iteration"}
    assert {row["phase"] for row in rows.values()} == {"fwd"}
    conv1 = stored(str(db), run_id, "l.name = 'conv1' AND k.repeat = 1")
    assert rows["conv1"]["b_ms"] == pytest.approx(sum(r[10] for r in conv1), rel=0.05)


def test_a_trace_of_tracker_ranges_keeps_them_as_layer_phases(runner, tmp_path):
    """A trace whose ranges tracker names (the library arm's, 'conv1/fwd') is read as those."""
    trace = {
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "conv1/fwd", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
            {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "pid": 1, "tid": 1, "ts": 1, "dur": 8},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2, "dur": 1,
             "args": {"correlation": 7}},
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5, "dur": 3,
             "args": {"correlation": 7, "grid": [2, 1, 1], "block": [32, 1, 1]}},
        ]
    }  # fmt: skip
    path = tmp_path / "made.json"
    path.write_text(json.dumps(trace))
    db, run_id = imported(runner, tmp_path, path)
    assert [row[12:] for row in stored(db, run_id)] == [("conv1", "fwd", 0)]


def hostile(tmp_path: Path) -> list[tuple[Path, str]]:
    good = gzip.decompress(ALEXNET.read_bytes())
    huge = {"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 1, "args": {"grid": [10**30, 1, 1]}}
    cases = {
        "truncated.json": good[: len(good) // 2],
        "corrupt.json.gz": ALEXNET.read_bytes()[:5000] + b"\x00" * 100,
        "not-gzip.json.gz": good[:1000],
        "text.json": b"hello",
        "number.json": b"42",
        "nested.json": b"[" * 200_000 + b"]" * 200_000,
        "cpu-only.json": json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 0}]}).encode(),
        "bad-event.json": json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "ts": "soon"}]}).encode(),
        "events-not-a-list.json": json.dumps({"traceEvents": {"a": 1}}).encode(),
        "huge-grid.json": json.dumps({"traceEvents": [huge]}).encode(),
    }
    paths = []
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        paths.append(tmp_path / name)
    messages = ["cannot read", "cannot read", "cannot read", "cannot read", "not a trace", "nests deeper",
                "holds no GPU kernel", "a malformed event", "a malformed event", "out of range"]  # fmt: skip
    return list(zip(paths, messages))


def test_a_file_that_is_no_trace_is_refused_in_one_line_and_stores_nothing(runner, tmp_path):
    db = tmp_path / "t.db"
    for path, message in hostile(tmp_path):
        done = runner.invoke(cli, ["import", str(path), "--db", str(db)])
        assert done.exit_code == 1 and message in done.output, (path.name, done.output)
        assert len(done.output.strip().splitlines()) == 1 and not db.exists(), path.name


def test_a_trace_past_the_size_limit_is_refused_before_it_is_parsed(runner, tmp_path, monkeypatch):
    """The limit bounds what is unpacked too: a gzip bomb stops at it."""
    monkeypatch.setattr("tracker.library.kineto.MOST_BYTES", 100_000)
    done = runner.invoke(cli, ["import", str(ALEXNET), "--db", str(tmp_path / "t.db")])
    assert done.exit_code == 1 and "more than 0.0953674 MiB of JSON" in done.output and not (tmp_path / "t.db").exists()
