"""ReLU (kernels/relu.cu): one grid-stride kernel per phase, float4 loads with a scalar tail."""

from __future__ import annotations

import numpy as np

from tracker import reference as ref
from tracker.ops.launch import THREADS, Arrays, Backend, blocks
from tracker.ops.registry import OPS, Case, Op, launch
from tracker.ops.selftest import ELEMENTWISE, Check, f32


def _fwd(b: Backend, a: Arrays) -> None:
    b.launch("relu.cu", "relu_fwd_global", (blocks(a.x.size // 4 + 1),), (THREADS,), (a.x, a.y, a.x.size))


def _bwd(b: Backend, a: Arrays) -> None:
    """dx = dy where the forward's output is positive."""
    b.launch("relu.cu", "relu_bwd_global", (blocks(a.dy.size // 4 + 1),), (THREADS,), (a.dy, a.y, a.dx, a.dy.size))


def _check(c: Check, rng: np.random.Generator, case: Case) -> None:
    x = case.shapes["x"]
    xh, dyh = f32(rng, x), f32(rng, x)
    a = Arrays(x=c.put(xh), y=c.out(x))
    c.run("fwd", a)
    yh = c.compare("fwd", "y", a.y, ref.relu_fwd(xh.astype(np.float64)), ELEMENTWISE)
    a.dy, a.dx = c.put(dyh), c.out(x)
    c.run("bwd_data", a)
    c.compare("bwd_data", "dx", a.dx, ref.relu_bwd(dyh.astype(np.float64), yh), ELEMENTWISE)


def _torch_forward(h, wb, labels):
    import torch.nn.functional as F

    return F.relu(h)


RELU = OPS.register(
    Op(
        "relu",
        ("fwd", "bwd_data"),
        default="global",
        params=lambda layer: {},
        arrays=lambda case: {role: case.shapes["x"] for role in ("x", "y", "dy", "dx")},
        check=_check,
        torch_forward=_torch_forward,
        small_cases=(Case("relu", "odd", {"x": (2, 3, 5, 7)}),),  # 210 elements: the float4 loop and its tail
    )
)
RELU.add("global", fwd=launch(_fwd, "relu.cu:relu_fwd_global"), bwd_data=launch(_bwd, "relu.cu:relu_bwd_global"))
