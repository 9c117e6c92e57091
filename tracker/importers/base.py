"""What a reader makes of another tool's profile, whatever the file."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ImportedLaunch:
    """One kernel launch of the profile, in the order it ran."""

    kernel_name: str
    ranges: tuple[str, ...]  # the NVTX (or record_function) ranges open around it, outermost first
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers: int | None
    shared_bytes: int
    time_ms: float | None  # its duration, where the profile measured one
    start_ns: int | None = None  # when it began, on the profile's clock, where the profile says
    metrics: dict[str, float] = field(default_factory=dict)  # catalog name -> value, in the catalog's unit


@dataclass(frozen=True)
class Imported:
    """A profile read from a file: who made it, on which GPU, how, and its launches."""

    path: str
    format: str  # ncu-rep, ...: the FORMATS name
    collector: str  # the backend it stands for: ncu (counters), events (times only)
    tool: str  # the tool and version that wrote it: 'ncu 2020.1.0'
    device_name: str | None
    compute_capability: str | None
    sm_count: int | None
    settings: dict  # how it profiled (clock and cache control, replay), as the file says
    launches: list[ImportedLaunch]
    sources: dict[str, str] = field(default_factory=dict)  # catalog name -> the tool's own name
