"""Each layer phase run once per counter pass, from the same state: for a collector that counts in
passes and leaves the replaying to tracker (CUPTI's user replay, issue 47), where ncu replays each
launch itself. Before a step's first pass every array it reads or writes is copied on the device;
before each later pass the copies are written back, so that an output a step adds into (a skip's
gradient summed with its share, a batch norm's running statistics) is not added twice, every pass
runs the same launches on the same data, and the last leaves what one run leaves. The copies run
between passes, outside what is counted.

Tested on the CPU emulation with a stand-in for the profiler (tests/test_replay.py); nothing here
has run on a GPU yet.
"""

from __future__ import annotations

from typing import Protocol

from tracker.errors import ProfilerFailed
from tracker.gpu.network import Executor, Step

MAX_PASSES = 500  # a profiler still asking after this many is broken, not thorough (ncu: 18 on an H100)


class Passes(Protocol):
    """The profiler's side of a replay."""

    def start(self) -> None:
        """A pass begins (CUPTI: cuptiRangeProfilerStart)."""
        ...

    def stop(self) -> bool:
        """It ends; whether every pass the counters need has run (CUPTI: Stop's isAllPassSubmitted)."""
        ...


def replay_iteration(executor: Executor, passes: Passes) -> list[int]:
    """One iteration of ``executor``'s plan, each step replayed until ``passes`` has what it needs;
    the passes each step took."""
    return [replay_step(executor, step, passes) for step in executor.steps]


def replay_step(executor: Executor, step: Step, passes: Passes) -> int:
    """``step`` once per pass, its arrays restored between passes; how many passes it took."""
    arrays = executor.arrays(step)
    saved = [array.copy() for array in arrays]
    for count in range(1, MAX_PASSES + 1):
        executor.b.context = step
        passes.start()
        executor.step(step)
        if passes.stop():
            return count
        for array, copy in zip(arrays, saved):
            array[...] = copy
    raise ProfilerFailed(f"{step.layer.name}/{step.phase}: the profiler still asked for passes after {MAX_PASSES}")
