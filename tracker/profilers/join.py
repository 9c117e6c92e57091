"""The two-pass join (docs/ARCHITECTURE.md, "The path of a profile", step 6): pass 1's launch
log and pass 2's counters, matched on invocation order, with the kernel name and the NVTX
``layer/phase`` range checked on every row.

A missing launch, an extra one, or a row whose kernel or range differs fails the whole join
with a message naming the first bad invocation; nothing is returned half-joined, so nothing is
stored half-joined. A pass-2 launch that ran outside every NVTX range (its range None) joins a
pass-1 launch logged outside every range (``in_range`` False: the library arm's autograd engine
sums gradients between two backward nodes, where no range is open, and pass 1 gives the kernel
to the layer phase whose call ran it); any other is no layer phase's and is left out.

Where ncu prints the kernel after the range (``layer/phase/kernel``), that kernel must be pass
1's: ncu's demangler and PyTorch's profiler's (a library kernel's full name) write the same name
differently, so both are compared in ``kernel_names.comparable`` form.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from tracker.errors import JoinError
from tracker.kernel_names import comparable, kernel_base
from tracker.profilers.ncu_csv import ProfiledLaunch


class Logged(Protocol):
    """What the join reads of a pass-1 launch (tracker.gpu.workload.LoggedLaunch is one)."""

    @property
    def invocation(self) -> int: ...

    @property
    def kernel_name(self) -> str: ...

    @property
    def range(self) -> str: ...  # the NVTX range it ran in: 'layer/phase'

    @property
    def in_range(self) -> bool: ...  # False: pass 1 saw it outside every range, during its layer phase's call


def _describe(launch: Logged) -> str:
    return f"invocation {launch.invocation} ({launch.range}, {launch.kernel_name})"


def join(launches: Sequence[Logged], profiled: list[ProfiledLaunch], ranges: Sequence[str | None] | None) -> list[dict]:
    """Metric rows (invocation, name, value) for ``launches`` (pass 1, in invocation order) from
    ``profiled`` (pass 2, in ID order) and the innermost NVTX range of each profiled launch
    (``ranges``: None for a launch outside every range; None for all where the profiler cannot
    report ranges: nvprof's GPU trace)."""
    profiled, inside = _in_ranges(launches, profiled, ranges)
    for i, (row, got) in enumerate(zip(launches, profiled)):
        if kernel_base(got.kernel) != kernel_base(row.kernel_name):
            raise JoinError(f"{_describe(row)}: pass 2 profiled kernel '{got.kernel}' there")
        if inside is None:
            continue
        if not row.in_range and inside[i] is not None:
            raise JoinError(f"{_describe(row)}: pass 1 saw it outside every range, pass 2 inside '{inside[i]}'")
        if row.in_range and not _same_range(inside[i] or "", row.range, row.kernel_name):
            raise JoinError(f"{_describe(row)}: pass 2 saw it inside NVTX range '{inside[i]}'")
    if len(profiled) < len(launches):
        raise JoinError(
            f"{_describe(launches[len(profiled)])} is missing from pass 2, which profiled "
            f"{len(profiled)} of {len(launches)} launches"
        )
    if len(profiled) > len(launches):
        extra = profiled[len(launches)]
        raise JoinError(
            f"pass 2 profiled {len(profiled)} launches, pass 1 logged {len(launches)}; the first "
            f"extra one is #{extra.id} ({extra.kernel})"
        )
    return [
        dict(invocation=row.invocation, name=name, value=value)
        for row, got in zip(launches, profiled)
        for name, value in got.metrics.items()
    ]


def _in_ranges(
    launches: Sequence[Logged], profiled: list[ProfiledLaunch], ranges: Sequence[str | None] | None
) -> tuple[list[ProfiledLaunch], list[str | None] | None]:
    """The profiled launches that belong to a layer phase, with their ranges (all, and None, where
    the profiler reports no ranges): those inside a range, and one outside every range where pass
    1 logged one outside every range next."""
    if ranges is None:
        return profiled, None
    if len(ranges) != len(profiled):
        raise JoinError(f"pass 2 reports {len(profiled)} launches but NVTX ranges for {len(ranges)}")
    kept: list[ProfiledLaunch] = []
    inside: list[str | None] = []
    for got, printed in zip(profiled, ranges):
        expected = launches[len(kept)] if len(kept) < len(launches) else None
        if printed is None and (expected is None or expected.in_range):
            continue  # no layer phase's
        kept.append(got)
        inside.append(printed)
    return kept, inside


def _same_range(printed: str, expected: str, kernel: str) -> bool:
    """ncu prints the innermost push/pop range, possibly behind a domain (``domain@range``) or
    its enclosing ranges, and (ncu 2025.3 on an H100) followed by the kernel's name:
    ``conv1/fwd/conv2d_fwd_implicit``. The expected ``layer/phase`` must be the whole of the
    range, and a kernel printed after it must be ``kernel`` (pass 1's name for it)."""
    printed = printed.strip().rstrip("/")
    for match in re.finditer(f"(?:^|(?<=[/@])){re.escape(expected)}(?=/|$)", printed):
        after = printed[match.end() + 1 :]
        if not after or comparable(after) == comparable(kernel):
            return True
    return False
