"""Gradient accumulation (kernels/accumulate.cu): dst += src, for an activation several layers
read. No network layer has this kind: the executor launches it in the first backward phase of a
layer whose output has several readers (tracker/gpu/network.py), before that phase's own kernels.
Registered as an op so that it is compiled, checked and listed as every kernel is."""

from __future__ import annotations

import numpy as np

from tracker.ops.launch import THREADS, Arrays, Backend, blocks
from tracker.ops.registry import OPS, Case, Op, launch
from tracker.ops.selftest import ELEMENTWISE, Check, f32


def _add(b: Backend, a: Arrays) -> None:
    """``a.dy`` += ``a.dx2``: a layer's output gradient gets another reader's share."""
    b.launch("accumulate.cu", "grad_accumulate", (blocks(a.dy.size // 4 + 1),), (THREADS,), (a.dx2, a.dy, a.dy.size))


def _check(c: Check, rng: np.random.Generator, case: Case) -> None:
    x = case.shapes["x"]
    dyh, otherh = f32(rng, x), f32(rng, x)
    expected = dyh.astype(np.float64) + otherh  # before the run: a backend may share dyh's memory (torch on the CPU)
    a = Arrays(dy=c.put(dyh), dx2=c.put(otherh))
    c.run("bwd_data", a)
    c.compare("bwd_data", "dy", a.dy, expected, ELEMENTWISE)


ACCUMULATE = OPS.register(
    Op(
        "accumulate",
        ("bwd_data",),
        default="global",
        params=lambda layer: {},
        arrays=lambda case: {role: case.shapes["x"] for role in ("dy", "dx2")},
        check=_check,
        small_cases=(Case("accumulate", "acc-odd", {"x": (2, 3, 5, 7)}),),  # 210 elements: the float4 loop and its tail
    )
)
ACCUMULATE.add("global", bwd_data=launch(_add, "accumulate.cu:grad_accumulate"))
