"""The profilers' real public output (tests/data/ncu) as the parser, join and runner tests read
it, and a pass-1 launch as the join reads it."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

DATA = Path(__file__).parent / "data" / "ncu"
NCU_FILES = sorted(DATA.glob("ncu-*.csv"))


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


SAMPLE = read("ncu-details-v100-ncu2020.1-nvtx-dram.csv")


class Logged(NamedTuple):
    """A pass-1 launch as the join reads it (tracker.profilers.join.Logged)."""

    invocation: int
    kernel_name: str
    range: str
    in_range: bool = True
