"""Local response normalization across channels (kernels/lrn.cu): a grid-stride kernel per
phase (global), and window kernels (shared) whose threads each walk one position's channels,
the window in registers."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracker import reference as ref
from tracker.ops.launch import THREADS, WAVE, Arrays, Backend, Struct, blocks, tiles
from tracker.ops.registry import OPS, Case, Op, launch
from tracker.ops.selftest import REDUCTION, Check, f32

SOURCE = "lrn.cu"
# The window the window kernels hold in registers (-D LRN_WINDOW): AlexNet's, every LRN of
# tracker's networks; a window of another width runs the global kernels.
WINDOW = 5
# Fewest channels a thread walks where the channels are cut into runs: each run reads its
# window's halo (WINDOW - 1 channels, twice that for the backward's x) again.
MIN_RUN = 8 * (WINDOW - 1)
ELSEWHERE = f"an LRN whose window is not {WINDOW} channels wide runs the global kernels"


def lrn_shape(x_shape: tuple, size: int, alpha: float, beta: float, k: float) -> Struct:
    N, C, H, W = x_shape
    fields = (("N", "i"), ("C", "i"), ("HW", "i"), ("size", "i"), ("alpha", "f"), ("beta", "f"), ("k", "f"))
    return Struct("LrnShape", fields, (N, C, H * W, size, alpha, beta, k))


def _fwd_global(b: Backend, a: Arrays, **p: Any) -> None:
    b.launch(SOURCE, "lrn_fwd_global", (blocks(a.x.size),), (THREADS,), (a.x, a.y, lrn_shape(a.x.shape, **p)))


def channel_run(x_shape: tuple) -> int:
    """Channels each thread of the window kernels walks: all of them, unless the images'
    positions make fewer than WAVE blocks; then runs of at least MIN_RUN channels, enough of them
    for about WAVE blocks."""
    N, C, H, W = x_shape
    runs = max(1, min(tiles(WAVE, N * tiles(H * W, THREADS)), C // MIN_RUN))
    return tiles(C, runs)


def _window(kernel: str, b: Backend, a: Arrays, arrays: tuple, p: dict[str, Any]) -> None:
    N, C, H, W = a.x.shape
    run = channel_run(a.x.shape)
    b.launch(
        SOURCE, kernel, (tiles(H * W, THREADS), N, tiles(C, run)), (THREADS,), (*arrays, lrn_shape(a.x.shape, **p), run)
    )


def _fwd_shared(b: Backend, a: Arrays, **p: Any) -> None:
    if p["size"] != WINDOW:
        _fwd_global(b, a, **p)
        return
    _window("lrn_fwd_window", b, a, (a.x, a.y), p)


def _bwd_global(b: Backend, a: Arrays, **p: Any) -> None:
    b.launch(
        SOURCE, "lrn_bwd_global", (blocks(a.x.size),), (THREADS,), (a.dy, a.x, a.y, a.dx, lrn_shape(a.x.shape, **p))
    )


def _bwd_shared(b: Backend, a: Arrays, **p: Any) -> None:
    if p["size"] != WINDOW:
        _bwd_global(b, a, **p)
        return
    _window("lrn_bwd_window", b, a, (a.dy, a.x, a.y, a.dx), p)


def _windowed(case: Case, phase: str) -> bool:
    """Where the shared variant runs its own kernels: LRNs WINDOW channels wide."""
    return case.params["size"] == WINDOW


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
        defines={"LRN_WINDOW": WINDOW},
        small_cases=(
            Case(
                "lrn",
                "strips",
                {"x": (2, 7, 5, 8)},  # 40 positions; 7 channels: windows clipped at either edge, and whole
                {"size": 5, "alpha": 0.5, "beta": 0.75, "k": 2.0},
            ),
            Case(
                "lrn",
                "beta",
                {"x": (2, 6, 3, 3)},  # a beta other than AlexNet's: exp2(-beta log2 s)
                {"size": 5, "alpha": 0.3, "beta": 0.6, "k": 1.0},
            ),
            Case(
                "lrn",
                "narrow",
                {"x": (2, 6, 3, 3)},  # a window of another width: the shared variant runs global's kernels
                {"size": 3, "alpha": 0.5, "beta": 0.75, "k": 2.0},
            ),
        ),
    )
)
LRN.add(
    "global", fwd=launch(_fwd_global, "lrn.cu:lrn_fwd_global"), bwd_data=launch(_bwd_global, "lrn.cu:lrn_bwd_global")
)
LRN.add(
    "shared",
    applies=_windowed,
    fwd=launch(_fwd_shared, "lrn.cu:lrn_fwd_window", "lrn.cu:lrn_fwd_global", note=ELSEWHERE),
    bwd_data=launch(_bwd_shared, "lrn.cu:lrn_bwd_window", "lrn.cu:lrn_bwd_global", note=ELSEWHERE),
)
