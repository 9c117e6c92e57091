"""Batch normalization in training mode (kernels/batchnorm.cu), 2-D and 3-D (the 3-D U-Net's conv ->
batchnorm -> relu blocks): each channel normalized by its batch statistics over every image and
position, then scaled by ``w`` and shifted by ``bias`` (C,); the forward saves each channel's mean
and inverse standard deviation for the backward and moves the running statistics, as PyTorch's
F.batch_norm(training=True) does.

``global`` reduces through global memory (per-warp partials from a (parts, C) grid, one thread per
channel merging them, then an element-wise launch); ``shared`` runs one block per channel and
reduces in shared memory, the whole phase in one launch. kernels/batchnorm.cu says what each buys.

The launchers read ``Arrays``' batch-norm roles: ``mean`` and ``invstd`` (C,: the forward writes
them, the backward reads them) and ``running_mean`` and ``running_var`` (C,: the forward updates
them in place; None keeps none).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracker import reference as ref
from tracker.errors import TrackerError
from tracker.ops.launch import THREADS, Arrays, Backend, Struct, blocks, tiles
from tracker.ops.registry import OPS, Case, Op, launch
from tracker.ops.selftest import REDUCTION, Check, f32

SOURCE = "batchnorm.cu"
EPS, MOMENTUM = 1e-5, 0.1  # PyTorch's defaults (nn.BatchNorm2d/3d)
PER_THREAD = 4  # elements each thread of a global reduction takes at least, where the channel allows
WAVE = 1024  # blocks that fill a large GPU several times over: fewer channels are cut into more parts
CHANNEL_THREADS = 1024  # the shared variant's block, one a channel: as many loads in flight on its SM as it can
WARPS = THREADS // 32  # partials a block of the global reductions writes
STATS = ("mean", "invstd", "running_mean", "running_var")  # batch norm's own roles of Arrays


def bn_shape(x_shape: tuple, eps: float, momentum: float) -> Struct:
    """(N, C, S, eps, momentum), S the positions of an image (2-D or 3-D)."""
    N, C, *spatial = x_shape
    if len(spatial) not in (2, 3):
        raise TrackerError(f"batch norm runs 2-D and 3-D inputs (N, C, *spatial); got shape {tuple(x_shape)}")
    S = math.prod(spatial)
    if N * S < 2:
        raise TrackerError(
            f"batch norm in training mode needs more than one value a channel; shape {tuple(x_shape)} "
            "has one (a batch of at least 2)"
        )
    fields = (("N", "i"), ("C", "i"), ("S", "i"), ("eps", "f"), ("momentum", "f"))
    return Struct("BnShape", fields, (N, C, S, eps, momentum))


def _stats(a: Arrays, *roles: str) -> tuple:
    """The batch-norm roles a launcher reads: a clear error where the executor handed none."""
    if any(getattr(a, role, None) is None for role in roles):
        raise TrackerError(f"batch norm needs the arrays {', '.join(roles)} (C,)")
    return tuple(getattr(a, role) for role in roles)


def parts(M: int, C: int) -> int:
    """Blocks per channel of a global reduction: WAVE blocks in all where the channels are few, each
    thread keeping at least PER_THREAD elements."""
    return max(1, min(tiles(WAVE, C), tiles(M, PER_THREAD * THREADS)))


def _channel_block(M: int) -> int:
    """Threads of a channel's block in the shared variant: one per element up to CHANNEL_THREADS, whole warps."""
    return min(CHANNEL_THREADS, 32 * tiles(M, 32))


def _fwd_global(b: Backend, a: Arrays, eps: float, momentum: float) -> None:
    s = bn_shape(a.x.shape, eps, momentum)
    N, C, S, *_ = s.values
    mean, invstd = _stats(a, "mean", "invstd")
    running_mean, running_var = getattr(a, "running_mean", None), getattr(a, "running_var", None)
    p = parts(N * S, C)
    partial = b.empty((C, p * WARPS, 3))
    b.launch(SOURCE, "batchnorm_moments_global", (p, C), (THREADS,), (a.x, partial, s))
    b.launch(
        SOURCE,
        "batchnorm_stats_global",
        (tiles(C, THREADS),),
        (THREADS,),
        (partial, mean, invstd, running_mean, running_var, p * WARPS, s),
    )
    b.launch(SOURCE, "batchnorm_fwd_global", (blocks(a.x.size),), (THREADS,), (a.x, mean, invstd, a.w, a.bias, a.y, s))


def _sums_global(b: Backend, a: Arrays, s: Struct, mean: Any, invstd: Any, dw: Any, db: Any) -> None:
    """dw = sum dy xhat, db = sum dy per channel, through per-warp partials."""
    N, C, S, *_ = s.values
    p = parts(N * S, C)
    partial = b.empty((C, p * WARPS, 2))
    b.launch(SOURCE, "batchnorm_sums_global", (p, C), (THREADS,), (a.dy, a.x, mean, partial, s))
    b.launch(
        SOURCE,
        "batchnorm_sums_finish_global",
        (tiles(C, THREADS),),
        (THREADS,),
        (partial, invstd, dw, db, p * WARPS, C),
    )


def _bwd_weight_global(b: Backend, a: Arrays, eps: float, momentum: float) -> None:
    s = bn_shape(a.x.shape, eps, momentum)
    mean, invstd = _stats(a, "mean", "invstd")
    _sums_global(b, a, s, mean, invstd, a.dw, a.db)


def _bwd_data_global(b: Backend, a: Arrays, eps: float, momentum: float) -> None:
    """The channel sums again (bwd_data runs alone: it reads no bwd_weight output), then dx."""
    s = bn_shape(a.x.shape, eps, momentum)
    mean, invstd = _stats(a, "mean", "invstd")
    sums = b.empty((2, s.values[1]))
    _sums_global(b, a, s, mean, invstd, sums[0], sums[1])
    b.launch(
        SOURCE,
        "batchnorm_bwd_data_global",
        (blocks(a.x.size),),
        (THREADS,),
        (a.dy, a.x, mean, invstd, a.w, sums[0], sums[1], a.dx, s),
    )


def _fwd_shared(b: Backend, a: Arrays, eps: float, momentum: float) -> None:
    s = bn_shape(a.x.shape, eps, momentum)
    N, C, S, *_ = s.values
    mean, invstd = _stats(a, "mean", "invstd")
    running_mean, running_var = getattr(a, "running_mean", None), getattr(a, "running_var", None)
    b.launch(
        SOURCE,
        "batchnorm_fwd_shared",
        (C,),
        (_channel_block(N * S),),
        (a.x, a.w, a.bias, a.y, mean, invstd, running_mean, running_var, s),
    )


def _bwd_weight_shared(b: Backend, a: Arrays, eps: float, momentum: float) -> None:
    s = bn_shape(a.x.shape, eps, momentum)
    N, C, S, *_ = s.values
    mean, invstd = _stats(a, "mean", "invstd")
    b.launch(
        SOURCE, "batchnorm_bwd_weight_shared", (C,), (_channel_block(N * S),), (a.dy, a.x, mean, invstd, a.dw, a.db, s)
    )


def _bwd_data_shared(b: Backend, a: Arrays, eps: float, momentum: float) -> None:
    s = bn_shape(a.x.shape, eps, momentum)
    N, C, S, *_ = s.values
    mean, invstd = _stats(a, "mean", "invstd")
    b.launch(
        SOURCE, "batchnorm_bwd_data_shared", (C,), (_channel_block(N * S),), (a.dy, a.x, mean, invstd, a.w, a.dx, s)
    )


def inputs(rng: np.random.Generator, x: tuple) -> tuple[np.ndarray, ...]:
    """(x, w, bias, running_mean, running_var, dy), float32: x off zero by a different mean a
    channel (what a sum of squares would lose digits to), the scale near 1, the shift near 0."""
    C = x[1]
    xh = (f32(rng, x, 2.0) + f32(rng, (1, C, *([1] * (len(x) - 2))), 3.0)).astype(np.float32)
    w, bias = (1 + f32(rng, (C,), 0.2)).astype(np.float32), f32(rng, (C,), 0.1)
    running = f32(rng, (C,), 0.1), (1 + rng.random(C)).astype(np.float32)
    return xh, w, bias, *running, f32(rng, x)


def _check(c: Check, rng: np.random.Generator, case: Case) -> None:
    x, p = case.shapes["x"], case.params
    C, M = x[1], math.prod(x) // x[1]
    xh, wh, bh, rm, rv, dyh = inputs(rng, x)
    x64, w64 = xh.astype(np.float64), wh.astype(np.float64)
    y, mean, var = ref.batchnorm_fwd(x64, w64, bh.astype(np.float64), p["eps"])
    a = Arrays(
        x=c.put(xh),
        y=c.out(x),
        w=c.put(wh),
        bias=c.put(bh),
        mean=c.out((C,)),
        invstd=c.out((C,)),
        running_mean=c.put(rm),
        running_var=c.put(rv),
    )
    c.run("fwd", a, **p)
    c.compare("fwd", "y", a.y, y, REDUCTION)
    # PyTorch's phases (tracker/library/accuracy.py) keep their statistics inside F.batch_norm,
    # which its forward's signature hands no buffers: only our kernels' are compared.
    if c.variant in BATCHNORM.variants:
        c.compare("fwd", "mean", a.mean, mean, REDUCTION)
        c.compare("fwd", "invstd", a.invstd, 1 / np.sqrt(var + p["eps"]), REDUCTION)
        running = ref.batchnorm_running(rm.astype(np.float64), rv.astype(np.float64), mean, var, M, p["momentum"])
        c.compare("fwd", "running_mean", a.running_mean, running[0], REDUCTION)
        c.compare("fwd", "running_var", a.running_var, running[1], REDUCTION)
    dx, dw, db = ref.batchnorm_bwd(dyh.astype(np.float64), x64, w64, p["eps"])
    a.dy, a.dw, a.db = c.put(dyh), c.out((C,)), c.out((C,))
    c.run("bwd_weight", a, **p)
    c.compare("bwd_weight", "dw", a.dw, dw, REDUCTION)
    c.compare("bwd_weight", "db", a.db, db, REDUCTION)
    a.dx = c.out(x)
    c.run("bwd_data", a, **p)
    c.compare("bwd_data", "dx", a.dx, dx, REDUCTION)


def _arrays(case: Case) -> dict[str, tuple[int, ...]]:
    x = case.shapes["x"]
    C = (x[1],)
    return {"x": x, "y": x, "dy": x, "dx": x, "w": C, "bias": C, "dw": C, "db": C, **{role: C for role in STATS}}


def _torch_forward(h, wb, labels, eps: float, momentum: float):
    """F.batch_norm in training mode on fresh running buffers (the signature carries none of ours)."""
    import torch
    import torch.nn.functional as F

    w, bias = wb
    C = h.shape[1]
    running_mean = torch.zeros(C, dtype=h.dtype, device=h.device)
    running_var = torch.ones(C, dtype=h.dtype, device=h.device)
    return F.batch_norm(h, running_mean, running_var, w, bias, training=True, momentum=momentum, eps=eps)


def _case(name: str, x: tuple) -> Case:
    return Case("batchnorm", name, {"x": x, "w": (x[1],)}, {"eps": EPS, "momentum": MOMENTUM})


# The default is `global`: it keeps every SM busy at any channel count; no GPU has timed either yet.
BATCHNORM = OPS.register(
    Op(
        "batchnorm",
        ("fwd", "bwd_data", "bwd_weight"),
        default="global",
        params=lambda layer: {"eps": EPS, "momentum": MOMENTUM},
        arrays=_arrays,
        check=_check,
        torch_forward=_torch_forward,
        small_cases=(
            _case("2d-odd", (3, 7, 11, 13)),  # 429 a channel: one part, a short block
            _case("3d-parts", (2, 5, 7, 9, 11)),  # 1,386 a channel: two parts, a walk wrapping images
            _case("2d-small-planes", (40, 3, 5, 7)),
        ),  # 35 positions: a stride over several images
    )
)
BATCHNORM.add(
    "global",
    fwd=launch(
        _fwd_global,
        "batchnorm.cu:batchnorm_moments_global",
        "batchnorm.cu:batchnorm_stats_global",
        "batchnorm.cu:batchnorm_fwd_global",
    ),
    bwd_data=launch(
        _bwd_data_global,
        "batchnorm.cu:batchnorm_sums_global",
        "batchnorm.cu:batchnorm_sums_finish_global",
        "batchnorm.cu:batchnorm_bwd_data_global",
    ),
    bwd_weight=launch(
        _bwd_weight_global, "batchnorm.cu:batchnorm_sums_global", "batchnorm.cu:batchnorm_sums_finish_global"
    ),
)
BATCHNORM.add(
    "shared",
    fwd=launch(_fwd_shared, "batchnorm.cu:batchnorm_fwd_shared"),
    bwd_data=launch(_bwd_data_shared, "batchnorm.cu:batchnorm_bwd_data_shared"),
    bwd_weight=launch(_bwd_weight_shared, "batchnorm.cu:batchnorm_bwd_weight_shared"),
)
