"""The one GPU timing routine: `tracker tune`'s candidates, the kernel benchmark's variants and
baselines, and the events backend's per-iteration kernel time all read it.

A repetition: flush L2 if asked (the backend's ``flush_l2``: cold-L2 times), run the body,
synchronize, and take its event time (CUDA events: those of the launches the backend logged, or
one pair around the body, ``cupy_backend.bracketed``); the host clock around body and
synchronize is taken too. When every repetition has an event time those are the times, else the
host clock's (the CPU emulation, a backend that does not time): ``Timing.timer`` says which.
The statistic is tracker/stats.py's, the same as the store's: the median and the spread, (max -
min) as a percentage of |median|.

Backend-neutral and free of CuPy, like the executor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from time import perf_counter
from typing import TYPE_CHECKING

from tracker.stats import Stats, over_repeats

if TYPE_CHECKING:
    from tracker.ops.launch import LaunchRecord


@dataclass(frozen=True)
class Timing:
    times_ms: tuple[float, ...]  # one per repetition
    timer: str  # "events" (CUDA events) or "wall" (the host clock)

    @property
    def stats(self) -> Stats:
        stats = over_repeats(self.times_ms)
        assert stats is not None, "a Timing has at least one repetition"
        return stats

    @property
    def median_ms(self) -> float:
        return self.stats.median

    @property
    def spread_pct(self) -> float | None:
        return self.stats.spread_pct


def repeat(
    body: Callable[[], object],
    reps: int,
    synchronize: Callable[[], None],
    events: Callable[[], float | None] = lambda: None,
    flush: Callable[[], None] | None = None,
    warmup: int = 0,
) -> Timing:
    """Time ``body`` over ``reps`` repetitions after ``warmup`` untimed ones: ``flush`` (if given)
    before each repetition, ``synchronize`` after it, then ``events()``, the repetition's event
    time (None: untimed). Event times where every repetition has one, else the host clock's."""
    if reps < 1:
        raise ValueError(f"time at least one repetition, not {reps}")
    for _ in range(warmup):
        body()
        synchronize()
    walls: list[float] = []
    timed: list[float | None] = []
    for _ in range(reps):
        if flush is not None:
            flush()
        start = perf_counter()
        body()
        synchronize()
        walls.append((perf_counter() - start) * 1e3)
        timed.append(events())
    if all(t is not None for t in timed):
        return Timing(tuple(t for t in timed if t is not None), "events")
    return Timing(tuple(walls), "wall")


def launch_ms(launches: Iterable[LaunchRecord]) -> float | None:
    """The summed event time of logged launches (after a synchronize); None where one of them
    was not timed, or none ran."""
    times = [k.time_ms for k in launches]
    if not times or any(t is None for t in times):
        return None
    return sum(t for t in times if t is not None)


def drain(log: list[LaunchRecord]) -> Callable[[], float | None]:
    """``repeat``'s ``events`` for a backend's launch log: the summed event time of what was
    launched since the last call (``launch_ms``), clearing the log."""

    def events() -> float | None:
        ms = launch_ms(log)
        log.clear()
        return ms

    return events
