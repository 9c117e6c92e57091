"""Ground floor: the one statistic over repetitions, for every layer that measures.

``over_repeats`` gives the median, min, max, count and spread of one quantity over repetitions:
the store's rollups (tracker/store/rollups.py) over a run's measured iterations, and every GPU
timing (tracker/gpu/timing.py: `tracker tune`, the kernel benchmark). The spread is always
(max - min) as a percentage of |median|; None where the median is 0. ``best_of`` picks the
lowest or highest of several values, ties included, for whatever names a fastest. Pure Python:
importable from any layer.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tracker.units import SHOWN_DIGITS


@dataclass(frozen=True)
class Stats:
    median: float
    min: float
    max: float
    repeats: int
    spread_pct: float | None  # (max - min) / |median|, in %; None where the median is 0


def over_repeats(values: Iterable[float | None]) -> Stats | None:
    """Median, min, max, count and spread of one quantity over repetitions (None and NaN left
    out); None when no repetition has a value."""
    known = sorted(float(v) for v in values if v is not None and v == v)  # NaN != NaN: missing too
    if not known:
        return None
    median = statistics.median(known)
    spread = 100.0 * (known[-1] - known[0]) / abs(median) if median != 0 else None
    return Stats(median, known[0], known[-1], len(known), spread)


def best_of(values: Sequence[float], lowest: bool = True) -> list[int]:
    """The indexes of the lowest (or highest) values, every one that equals it to the digits
    shown: two times a reader sees as one are a tie, and naming one of them would be arbitrary."""
    if not values:
        return []
    best = min(values) if lowest else max(values)
    return [i for i, v in enumerate(values) if f"{v:.{SHOWN_DIGITS}g}" == f"{best:.{SHOWN_DIGITS}g}"]


def tie(names: Sequence[str], shown: int = 3) -> str:
    """'fft', or 'winograd_f2 = winograd_f4 (tie)': the best, named as a tie where it is one
    (the first ``shown`` names, then how many more)."""
    if len(names) == 1:
        return names[0]
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return " = ".join(names[:shown]) + f"{more} (tie)"
