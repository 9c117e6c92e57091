"""Each layer phase run once per counter pass, from the same state: for a collector that counts in
passes and leaves the replaying to tracker (CUPTI's user replay), where ncu replays each
launch itself.

``replay_phase`` is the loop, for any implementation: run the phase, and while the profiler wants
another pass, put back what the phase changed, so that every pass runs the same launches on the
same data and the last leaves what one run leaves. Each implementation says what to put back:

- our kernels (``replay_step``): before a step's first pass every array it reads or writes is
  copied on the device, and written back before each later pass, so that an output a step adds
  into (a skip's gradient summed with its share, a batch norm's running statistics) is not added
  twice. The copies run between passes, outside what is counted;
- PyTorch's (``tracker/library/torch_net.py``, ``torch_module.py``): the running statistics a
  batch norm updates in place, and the gradients summed so far; each backward keeps its graph
  for the next pass.

Tested on the CPU (tests/test_replay.py: the emulation; tests/test_torch_replay.py: PyTorch's CPU
build) with a stand-in for the profiler; nothing here has run on a GPU yet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from tracker.errors import ProfilerFailed

if TYPE_CHECKING:
    from tracker.gpu.network import PlanRunner, Step

MAX_PASSES = 500  # a profiler still asking after this many is broken, not thorough (ncu: 18 on an H100)


class Passes(Protocol):
    """The profiler's side of a replay."""

    def start(self, phase: str) -> None:
        """A pass of the layer phase ``phase`` ('layer/phase') begins (CUPTI: cuptiRangeProfilerStart)."""
        ...

    def stop(self) -> bool:
        """It ends; whether every pass the counters need has run (CUPTI: Stop's isAllPassSubmitted)."""
        ...


def replay_phase(name: str, run: Callable[[], None], restore: Callable[[], None], passes: Passes) -> int:
    """``run`` (the layer phase ``name``) once per pass, ``restore`` between passes; how many passes it took."""
    for count in range(1, MAX_PASSES + 1):
        passes.start(name)
        run()
        if passes.stop():
            return count
        restore()
    raise ProfilerFailed(f"{name}: the profiler still asked for passes after {MAX_PASSES}")


def replay_iteration(executor: PlanRunner, passes: Passes) -> list[int]:
    """One iteration of ``executor``'s plan, each step replayed until ``passes`` has what it needs;
    the passes each step took."""
    return [replay_step(executor, step, passes) for step in executor.steps]


def replay_step(executor: PlanRunner, step: Step, passes: Passes) -> int:
    """``step`` of our kernels once per pass, its arrays restored between passes; how many passes it took."""
    arrays = executor.arrays(step)
    saved = [array.copy() for array in arrays]

    def restore() -> None:
        for array, copy in zip(arrays, saved):
            array[...] = copy

    executor.b.context = step  # the layer phase the launches serve, from the first pass's start
    return replay_phase(f"{step.layer.name}/{step.phase}", lambda: executor.step(step), restore, passes)
