"""Ground floor: the one statistic over repetitions, for every layer that measures.

``over_repeats`` gives the median, min, max, count and spread of one quantity over repetitions:
the store's rollups (tracker/store/rollups.py) over a run's measured iterations, and every GPU
timing (tracker/gpu/timing.py: `tracker tune`, the kernel benchmark). The spread is always
(max - min) as a percentage of |median|; None where the median is 0. Pure Python: importable
from any layer.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable


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
