"""On a GPU: every variant against the reference, and a short profile's complete launch log.
Marked `gpu`: skipped without a CUDA device (see conftest.py)."""

import pytest

from tracker.ops.selftest import network_cases
from tracker.nets import build

pytestmark = pytest.mark.gpu


def test_selftest_passes_every_variant():
    from tracker.gpu.runner import selftest, summarize

    results, device = selftest(tuple(network_cases(build("alexnet"), 2)), ("ca", "cg"), lambda line: None)
    failed = [r for r in summarize(results) if not r["passed"]]
    assert not failed, failed


def test_events_profile_logs_every_layer_phase(tmp_path):
    from tracker.profile import profile
    from tracker.store import launch_rows, open_store

    result = profile(str(tmp_path / "t.db"), build("alexnet"), 8, backend="events", repeat=2, warmup=1)
    launches = launch_rows(open_store(str(tmp_path / "t.db"), write=False), result.run_id)
    seen = {(k["layer_id"], k["phase"], k["repeat"]) for k in launches}
    expected = {(p.layer_id, p.phase, r) for p in result.predictions for r in range(2)}
    assert seen == expected
    assert all(k["time_ms"] > 0 for k in launches)
    assert [k["invocation"] for k in launches] == list(range(len(launches)))


def test_the_library_arm_logs_every_layer_phase_with_its_algorithm(tmp_path):
    """--impl torch on events: PyTorch's kernels placed under our ranges, every layer phase with a
    launch, each conv phase named by an algorithm, the versions recorded."""
    pytest.importorskip("torch")
    from tracker.gpu.workload import Workload
    from tracker.profile import profile_workload
    from tracker.store import find_run, launch_rows, layer_rows, open_store, run_dict

    db = str(tmp_path / "t.db")
    workload = Workload.of(build("alexnet"), 8, repeat=2, warmup=1, implementation="torch")
    result = profile_workload(db, workload, backend="events")
    store = open_store(db, write=False)
    launches = launch_rows(store, result.run_id)
    seen = {(k["layer_id"], k["phase"], k["repeat"]) for k in launches}
    assert seen == {(p.layer_id, p.phase, r) for p in result.predictions for r in range(2)}
    assert all(k["time_ms"] > 0 for k in launches)
    convs = {(r["layer"], r["phase"]): r["algorithm"] for r in layer_rows(store, result.run_id) if r["kind"] == "conv"}
    assert all(convs.values()), convs
    assert run_dict(find_run(store, result.run_id))["library"]["cudnn"]
