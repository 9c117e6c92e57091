"""The two-pass join (docs/ARCHITECTURE.md, "The path of a profile", step 6): pass 1's launch
log and pass 2's counters, matched on invocation order, with the kernel name and the NVTX
``layer/phase`` range checked on every row.

A missing launch, an extra one, or a row whose kernel or range differs fails the whole join
with a message naming the first bad invocation; nothing is returned half-joined, so nothing is
stored half-joined.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from tracker.errors import JoinError
from tracker.kernel_names import kernel_base
from tracker.profilers.ncu_csv import ProfiledLaunch


class Logged(Protocol):
    """What the join reads of a pass-1 launch (tracker.gpu.workload.Launch is one)."""

    @property
    def invocation(self) -> int: ...

    @property
    def kernel_name(self) -> str: ...

    @property
    def range(self) -> str: ...  # the NVTX range it ran in: 'layer/phase'


def _describe(launch: Logged) -> str:
    return f"invocation {launch.invocation} ({launch.range}, {launch.kernel_name})"


def join(launches: Sequence[Logged], profiled: list[ProfiledLaunch], ranges: list[str] | None) -> list[dict]:
    """Metric rows (invocation, name, value) for ``launches`` (pass 1, in invocation order) from
    ``profiled`` (pass 2, in ID order) and the innermost NVTX range of each profiled launch
    (``ranges``; None where the profiler cannot report ranges: nvprof's GPU trace)."""
    if ranges is not None and len(ranges) != len(profiled):
        raise JoinError(f"pass 2 reports {len(profiled)} launches but NVTX ranges for {len(ranges)}")
    for i, (row, got) in enumerate(zip(launches, profiled)):
        if kernel_base(got.kernel) != kernel_base(row.kernel_name):
            raise JoinError(f"{_describe(row)}: pass 2 profiled kernel '{got.kernel}' there")
        if ranges is not None and not _same_range(ranges[i], row.range, kernel_base(got.kernel)):
            raise JoinError(f"{_describe(row)}: pass 2 saw it inside NVTX range '{ranges[i]}'")
    if len(profiled) < len(launches):
        raise JoinError(f"{_describe(launches[len(profiled)])} is missing from pass 2, which profiled "
                        f"{len(profiled)} of {len(launches)} launches")
    if len(profiled) > len(launches):
        extra = profiled[len(launches)]
        raise JoinError(f"pass 2 profiled {len(profiled)} launches, pass 1 logged {len(launches)}; the first "
                        f"extra one is #{extra.id} ({extra.kernel})")
    return [dict(invocation=row.invocation, name=name, value=value)
            for row, got in zip(launches, profiled) for name, value in got.metrics.items()]


def _same_range(printed: str, expected: str, kernel: str) -> bool:
    """ncu prints the innermost push/pop range, possibly behind a domain (``domain@range``) or
    its enclosing ranges, and (ncu 2025.3 on an H100) followed by the kernel's name:
    ``conv1/fwd/conv2d_fwd_implicit``. The expected ``layer/phase`` must be the whole of what is
    left at the end."""
    printed = printed.rsplit("@", 1)[-1].strip().rstrip("/").removesuffix("/" + kernel)
    return printed == expected or printed.endswith("/" + expected)
