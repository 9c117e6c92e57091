"""Local response normalization across channels (kernels/lrn.cu): a grid-stride kernel per
phase, and a shared-memory variant with one block per strip of positions holding every channel."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracker import reference as ref
from tracker.ops.launch import THREADS, Arrays, Backend, Struct, blocks, tiles
from tracker.ops.registry import OPS, Case, Op, launch
from tracker.ops.selftest import REDUCTION, Check, f32

# Positions per block of the shared variant (blockDim.x; the kernels read it): keeps its shared
# memory, 4 bytes x channels x strip (x 3 arrays backward), under 48 KiB at AlexNet's 256 channels
# and lets 8 blocks of 256 threads share an SM.
STRIPS = {"fwd": 32, "bwd_data": 8}
SOURCE = "lrn.cu"


def lrn_shape(x_shape: tuple, size: int, alpha: float, beta: float, k: float) -> Struct:
    N, C, H, W = x_shape
    fields = (("N", "i"), ("C", "i"), ("HW", "i"), ("size", "i"), ("alpha", "f"), ("beta", "f"), ("k", "f"))
    return Struct("LrnShape", fields, (N, C, H * W, size, alpha, beta, k))


def _fwd_global(b: Backend, a: Arrays, **p: Any) -> None:
    b.launch(SOURCE, "lrn_fwd_global", (blocks(a.x.size),), (THREADS,), (a.x, a.y, lrn_shape(a.x.shape, **p)))


def _fwd_shared(b: Backend, a: Arrays, **p: Any) -> None:
    N, C, H, W = a.x.shape
    strip = STRIPS["fwd"]
    b.launch(
        SOURCE,
        "lrn_fwd_shared",
        (tiles(H * W, strip), N),
        (strip, THREADS // strip),
        (a.x, a.y, lrn_shape(a.x.shape, **p)),
        shared_bytes=4 * C * strip,
    )


def _bwd_global(b: Backend, a: Arrays, **p: Any) -> None:
    b.launch(
        SOURCE, "lrn_bwd_global", (blocks(a.x.size),), (THREADS,), (a.dy, a.x, a.y, a.dx, lrn_shape(a.x.shape, **p))
    )


def _bwd_shared(b: Backend, a: Arrays, **p: Any) -> None:
    N, C, H, W = a.x.shape
    strip = STRIPS["bwd_data"]
    b.launch(
        SOURCE,
        "lrn_bwd_shared",
        (tiles(H * W, strip), N),
        (strip, THREADS // strip),
        (a.dy, a.x, a.y, a.dx, lrn_shape(a.x.shape, **p)),
        shared_bytes=3 * 4 * C * strip,
    )


def _check(c: Check, rng: np.random.Generator, case: Case) -> None:
    x, p = case.shapes["x"], case.params
    xh, dyh = f32(rng, x, 2.0), f32(rng, x)
    a = Arrays(x=c.put(xh), y=c.out(x))
    c.run("fwd", a, **p)
    yh = c.compare("fwd", "y", a.y, ref.lrn_fwd(xh.astype(np.float64), **p), REDUCTION)
    a.dy, a.dx = c.put(dyh), c.out(x)
    c.run("bwd_data", a, **p)
    expected = ref.lrn_bwd(dyh.astype(np.float64), xh.astype(np.float64), yh.astype(np.float64), **p)
    c.compare("bwd_data", "dx", a.dx, expected, REDUCTION)


def _torch_forward(h, wb, labels, size: int, alpha: float, beta: float, k: float):
    import torch.nn.functional as F

    return F.local_response_norm(h, size, alpha, beta, k)


LRN = OPS.register(
    Op(
        "lrn",
        ("fwd", "bwd_data"),
        default="shared",
        params=lambda layer: {"size": layer.op.size, "alpha": layer.op.alpha, "beta": layer.op.beta, "k": layer.op.k},
        arrays=lambda case: {role: case.shapes["x"] for role in ("x", "y", "dy", "dx")},
        check=_check,
        torch_forward=_torch_forward,
        small_cases=(
            Case(
                "lrn",
                "strips",
                {"x": (2, 7, 5, 8)},  # 40 positions: a strip and a part
                {"size": 5, "alpha": 0.5, "beta": 0.75, "k": 2.0},
            ),
        ),
    )
)
LRN.add(
    "global", fwd=launch(_fwd_global, "lrn.cu:lrn_fwd_global"), bwd_data=launch(_bwd_global, "lrn.cu:lrn_bwd_global")
)
LRN.add(
    "shared", fwd=launch(_fwd_shared, "lrn.cu:lrn_fwd_shared"), bwd_data=launch(_bwd_shared, "lrn.cu:lrn_bwd_shared")
)
