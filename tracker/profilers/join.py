"""The two-pass join (docs/ARCHITECTURE.md, "The path of a profile", step 6): pass 1's launch
log and pass 2's counters, matched on invocation order, with the kernel name and the NVTX
``layer/phase`` range checked on every row.

A missing launch, an extra one, or a row whose kernel or range differs fails the whole join
with a message naming the first bad invocation; nothing is returned half-joined, so nothing is
stored half-joined. A pass-2 launch that ran outside every NVTX range (its range None) is no
layer phase's and is left out, as pass 1 leaves out such a launch (the library arm's autograd
engine launches a gradient accumulation between two backward nodes, where no range is open).

Where ncu prints the kernel after the range (``layer/phase/kernel``), that kernel must be pass
1's: ncu's demangler and PyTorch's profiler's (a library kernel's full name) write the same name
differently, so both are compared in ``kernel_names.comparable`` form.
"""

from __future__ import annotations

import re
from typing import Protocol, Sequence

from tracker.errors import JoinError
from tracker.kernel_names import comparable, kernel_base
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


def join(launches: Sequence[Logged], profiled: list[ProfiledLaunch],
         ranges: Sequence[str | None] | None) -> list[dict]:
    """Metric rows (invocation, name, value) for ``launches`` (pass 1, in invocation order) from
    ``profiled`` (pass 2, in ID order) and the innermost NVTX range of each profiled launch
    (``ranges``: None for a launch outside every range; None for all where the profiler cannot
    report ranges: nvprof's GPU trace)."""
    profiled, inside = _in_ranges(profiled, ranges)
    for i, (row, got) in enumerate(zip(launches, profiled)):
        if kernel_base(got.kernel) != kernel_base(row.kernel_name):
            raise JoinError(f"{_describe(row)}: pass 2 profiled kernel '{got.kernel}' there")
        if inside is not None and not _same_range(inside[i], row.range, row.kernel_name):
            raise JoinError(f"{_describe(row)}: pass 2 saw it inside NVTX range '{inside[i]}'")
    if len(profiled) < len(launches):
        raise JoinError(f"{_describe(launches[len(profiled)])} is missing from pass 2, which profiled "
                        f"{len(profiled)} of {len(launches)} launches")
    if len(profiled) > len(launches):
        extra = profiled[len(launches)]
        raise JoinError(f"pass 2 profiled {len(profiled)} launches, pass 1 logged {len(launches)}; the first "
                        f"extra one is #{extra.id} ({extra.kernel})")
    return [dict(invocation=row.invocation, name=name, value=value)
            for row, got in zip(launches, profiled) for name, value in got.metrics.items()]


def _in_ranges(profiled: list[ProfiledLaunch], ranges: Sequence[str | None] | None,
               ) -> tuple[list[ProfiledLaunch], list[str] | None]:
    """The profiled launches that ran inside a range, with their ranges (all, and None, where the
    profiler reports no ranges)."""
    if ranges is None:
        return profiled, None
    if len(ranges) != len(profiled):
        raise JoinError(f"pass 2 reports {len(profiled)} launches but NVTX ranges for {len(ranges)}")
    kept = [(got, printed) for got, printed in zip(profiled, ranges) if printed is not None]
    return [got for got, _ in kept], [printed for _, printed in kept]


def _same_range(printed: str, expected: str, kernel: str) -> bool:
    """ncu prints the innermost push/pop range, possibly behind a domain (``domain@range``) or
    its enclosing ranges, and (ncu 2025.3 on an H100) followed by the kernel's name:
    ``conv1/fwd/conv2d_fwd_implicit``. The expected ``layer/phase`` must be the whole of the
    range, and a kernel printed after it must be ``kernel`` (pass 1's name for it)."""
    printed = printed.strip().rstrip("/")
    for match in re.finditer(f"(?:^|(?<=[/@])){re.escape(expected)}(?=/|$)", printed):
        after = printed[match.end() + 1:]
        if not after or comparable(after) == comparable(kernel):
            return True
    return False
