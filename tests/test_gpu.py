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
