"""The replay a pass-counting collector relies on (tracker/gpu/replay.py), on the CPU
emulation with a stand-in for the profiler: every pass of every layer phase runs the same launches
on the same data, and the replayed iteration leaves what one plain iteration leaves, on a small 3-D
U-Net (skips whose gradients are summed, batch norms with running statistics, concatenation,
transposed convolution)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from tracker.errors import ProfilerFailed
from tracker.gpu.network import PlanRunner
from tracker.gpu.replay import replay_iteration, replay_step
from tracker.nets import build

pytestmark = pytest.mark.slow  # the CPU emulation


def small_unet3d():
    return build("unet3d", input_size="8", in_channels=1, base_filters=2, depth=2, classes=2)


class StandIn:
    """A profiler that wants ``passes`` passes of each step, and notes what each one ran and saw:
    the launches, and a digest of the step's arrays as the pass starts and as it ends."""

    def __init__(self, executor: PlanRunner, passes: int):
        self.executor, self.passes = executor, passes
        self.seen: dict[str, list[tuple]] = {}
        self.count = 0

    def digest(self) -> str:
        b = self.executor.b
        return hashlib.sha256(
            b"".join(np.ascontiguousarray(b.asnumpy(a)).tobytes() for a in self.executor.arrays(b.context))
        ).hexdigest()

    def start(self, phase: str) -> None:
        self.first, self.before = len(self.executor.b.log), self.digest()

    def stop(self) -> bool:
        b = self.executor.b
        ran = tuple((r.kernel, r.grid, r.block) for r in b.log[self.first :])
        step = b.context
        self.seen.setdefault(f"{step.layer.name}/{step.phase}", []).append((ran, self.before, self.digest()))
        self.count += 1
        return self.count % self.passes == 0


def state(executor: PlanRunner) -> dict[str, np.ndarray]:
    t, b = executor.t, executor.b
    arrays = {f"act {k}": v for k, v in t.act.items()} | {f"grad {k}": v for k, v in t.grad.items()}
    arrays |= {f"dw {k}": v[0] for k, v in t.param_grads.items()}
    arrays |= {f"statistic {k} {i}": s for k, v in t.statistics.items() for i, s in enumerate(v)}
    arrays |= {f"argmax {k}": v for k, v in t.argmax.items()}
    return {k: b.asnumpy(v) for k, v in arrays.items()}


def test_every_pass_runs_the_same_launches_on_the_same_data_and_leaves_one_runs_result(emulator):
    net = small_unet3d()
    once = PlanRunner(emulator, net, batch=1, chosen={}, seed=4)  # batch 1: concatenation in place, into views
    once.iteration()
    replayed = PlanRunner(emulator, net, batch=1, chosen={}, seed=4)
    stand_in = StandIn(replayed, passes=2)
    assert replay_iteration(replayed, stand_in) == [2] * len(replayed.steps)
    summed = [s for s in replayed.steps if (s.layer.name, s.phase) in replayed.summed_before]
    assert summed and any(s.layer.kind == "batchnorm" for s in replayed.steps)  # what replay must not add twice
    for key, passes in stand_in.seen.items():
        assert len(passes) == 2 and passes[0][0], key  # every step launched something, twice
        assert len(set(passes)) == 1, key  # ... the same launches, from the same data, to the same result
    expected, got = state(once), state(replayed)
    assert expected.keys() == got.keys()
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def test_a_profiler_that_never_has_enough_passes_is_one_line(emulator, monkeypatch):
    monkeypatch.setattr("tracker.gpu.replay.MAX_PASSES", 4)
    executor = PlanRunner(emulator, small_unet3d(), batch=1, chosen={}, seed=1)

    class Never:
        def start(self, phase: str) -> None:
            pass

        def stop(self) -> bool:
            return False

    with pytest.raises(ProfilerFailed, match=r"^enc1_conv1/fwd: the profiler still asked for passes after 4$"):
        replay_step(executor, executor.steps[0], Never())
