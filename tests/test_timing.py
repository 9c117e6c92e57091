"""The one statistic over repetitions (tracker/stats.py) and the one GPU timing routine
(tracker/gpu/timing.py): L2 flushed before each repetition when asked, CUDA events where every
repetition has them, else the host clock; and the layering that keeps tracker/gpu below tune,
profile and experiment."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from tracker.gpu.timing import Timing, drain, launch_ms, repeat
from tracker.ops.launch import LaunchRecord
from tracker.stats import Stats, over_repeats

GPU = Path(__file__).parent.parent / "tracker" / "gpu"


def test_the_statistic_is_the_median_and_the_spread_in_percent_of_the_absolute_median():
    assert over_repeats([3.0, 1.0, 2.0]) == Stats(2.0, 1.0, 3.0, 3, 100.0)
    assert over_repeats([4.0, 1.0, 2.0, 3.0]).spread_pct == pytest.approx(120.0)  # 3 / 2.5
    assert over_repeats([-1.0, -3.0, -2.0]).spread_pct == pytest.approx(100.0)  # of |median|: never negative
    assert over_repeats([2.0, None, math.nan, 4.0]) == Stats(3.0, 2.0, 4.0, 2, pytest.approx(200 / 3))
    assert over_repeats([]) is None and over_repeats([None, math.nan]) is None
    assert over_repeats([-1.0, 0.0, 1.0]).spread_pct is None  # zero median: no spread to state
    assert over_repeats([5]).spread_pct == 0.0 and isinstance(over_repeats([5]).median, float)


def test_the_store_reads_the_same_statistic():
    from tracker.store import rollups

    assert rollups.over_repeats is over_repeats


class Fake:
    """A backend's hooks, recording their order; ``event_ms`` per repetition (None: untimed)."""

    def __init__(self, event_ms):
        self.calls: list[str] = []
        self.event_ms = list(event_ms)

    def flush(self):
        self.calls.append("flush")

    def body(self):
        self.calls.append("body")

    def synchronize(self):
        self.calls.append("sync")

    def events(self):
        self.calls.append("events")
        return self.event_ms.pop(0)


def test_l2_is_flushed_before_each_repetition_and_not_before_a_warm_up():
    fake = Fake([1.0, 2.0, 3.0])
    timed = repeat(fake.body, 3, fake.synchronize, events=fake.events, flush=fake.flush, warmup=1)
    assert fake.calls == ["body", "sync"] + ["flush", "body", "sync", "events"] * 3
    assert timed == Timing((1.0, 2.0, 3.0), "events")
    assert (timed.median_ms, timed.spread_pct) == (2.0, 100.0) and timed.stats == over_repeats([1.0, 2.0, 3.0])

    unflushed = Fake([1.0])
    repeat(unflushed.body, 1, unflushed.synchronize, events=unflushed.events)
    assert unflushed.calls == ["body", "sync", "events"]


def test_events_where_every_repetition_has_them_else_the_host_clock():
    assert repeat(lambda: None, 2, lambda: None, events=Fake([0.5, 0.25]).events).timer == "events"
    partly = repeat(lambda: None, 3, lambda: None, events=Fake([0.5, None, 0.25]).events)
    assert partly.timer == "wall" and len(partly.times_ms) == 3 and all(t >= 0 for t in partly.times_ms)
    assert repeat(lambda: None, 2, lambda: None).timer == "wall"  # a backend without events
    with pytest.raises(ValueError, match="at least one repetition"):
        repeat(lambda: None, 0, lambda: None)


def test_a_repetition_is_the_summed_event_time_of_its_launches():
    def record(ms):
        return LaunchRecord("gemm.cu", "k", (1,), (32,), 0, None, time_ms=ms)

    assert launch_ms([record(1.0), record(0.5)]) == 1.5
    assert launch_ms([record(1.0), record(None)]) is None and launch_ms([]) is None
    log = [record(1.0), record(2.0)]
    events = drain(log)
    assert events() == 3.0 and log == [] and events() is None


def test_tune_times_a_candidate_through_the_routine(emulator, monkeypatch):
    """On the emulator: one L2 flush before each timed repetition (none before the warm-up, the
    log empty at each); the host clock while launches are untimed, their summed events once
    every launch is timed."""
    from samples import small_net

    from tracker import tune
    from tracker.ops.gemm import DEFAULT

    target = next(
        t
        for t in tune.targets(small_net(), batch=3, chosen={"linear": "shared"}, verify_batch=1)
        if (t.layer, t.phase) == ("fc3", "fwd")
    )
    arrays = tune._arrays(emulator, target.case)
    flushes: list[int] = []
    monkeypatch.setattr(emulator, "flush_l2", lambda: flushes.append(len(emulator.log)), raising=False)
    wall = tune._time(emulator, target, arrays, DEFAULT, reps=3)
    assert flushes == [0, 0, 0] and wall["timer"] == "wall" and wall["time_ms"] > 0
    assert wall["splits"] == 1 and emulator.log == []

    def synchronize():  # as CUDA events would: every logged launch timed, 0.25 ms each
        for record in emulator.log:
            record.time_ms = 0.25

    monkeypatch.setattr(emulator, "synchronize", synchronize)
    launches = len(_launches(emulator, target, arrays, DEFAULT))
    timed = tune._time(emulator, target, arrays, DEFAULT, reps=2)
    assert timed["timer"] == "events" and timed["time_ms"] == 0.25 * launches and timed["spread_pct"] == 0.0


def _launches(b, target, arrays, tile):
    from tracker.ops import OPS

    b.log.clear()
    OPS[target.op].launch(b, target.variant, target.phase, arrays, **target.case.params, tile=tile)
    launched = list(b.log)
    b.log.clear()
    return launched


UPPER = ("tracker.tune", "tracker.profile", "tracker.experiment")


def _imports(path: Path) -> set[str]:
    """Every module a source file imports, at the top or inside a function (``from tracker
    import tune`` counts as tracker.tune)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_nothing_under_tracker_gpu_imports_the_layer_above():
    sources = sorted(GPU.rglob("*.py"))
    assert GPU / "runner.py" in sources and GPU / "timing.py" in sources
    upward = {
        f"{path.relative_to(GPU.parent.parent)}: {name}"
        for path in sources
        for name in _imports(path)
        if any(name == upper or name.startswith(upper + ".") for upper in UPPER)
    }
    assert not upward, sorted(upward)
    assert "tracker.tune" in _imports(Path(__file__).parent.parent / "tracker" / "cli" / "gpu.py")  # the check sees one
