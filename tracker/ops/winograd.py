"""conv2d's Winograd variants (kernels/winograd.cu), non-fused, for stride-1 square 3x3 and 5x5
convolutions (AlexNet's conv2-5), all three phases: ``winograd`` runs F(2x2, rxr) (the
most accurate), ``winograd_f4`` F(4x4, rxr) (fewer multiplies, larger transforms, larger error;
`tracker experiment algorithms` puts both side by side with their errors).

Each phase is the filter transform, the input transform, alpha^2 GEMMs on the tuned GEMM core in
one launch (``gemm_nn_batched``: one per point of the alpha x alpha transformed tile, outputs x
channels times channels x tiles, the grid's z holding points x split-K slices; a launch a point
made 16-64 launches a phase; alpha = m + r - 1: 4 and 6 for F(2x2, 3x3) and F(2x2, 5x5),
6 and 8 for F(4x4, 3x3) and F(4x4, 5x5)) and the output transform. The transform matrices are derived here
by Cook-Toom (``matrices``, points 0, 1, -1, 2, -2, 1/2, -1/2: Lavin & Gray's) and checked to
reproduce the correlation exactly. The data gradient is a stride-1 convolution of dy padded by
r - 1 - pad with the filters turned and their channels swapped. The weight gradient is
F(rxr, mxm): dy's m x m tiles play the filter (``_weight_gradient``). Where the algorithm does not
apply (a stride above 1: conv1), the launch runs the shared variant's implicit GEMM, as its note
says; ``tracker model --algorithm winograd_f2`` (or ``winograd_f4``) prices the same choice.

``winograd_fused`` runs F(2x2, 3x3)'s forward and data gradient in one kernel (after
openCNN): the filter transform, then ``winograd_fused_a4``, whose load stage transforms the input
patches into shared memory and whose epilogue applies the output transform, so that neither the
transformed input nor the products pass through global memory; its weight gradient is
``winograd``'s. Other filters run the implicit GEMM. On an H200 it passes the selftest and runs
1.7-2.1x slower than ``winograd_f4`` at AlexNet's conv3-5 (tests/data/gpu-2026-11-26f-h200/RESULTS.md).
"""

from __future__ import annotations

import math
from functools import cache, partial
from typing import Any

import numpy as np

from tracker.kernel_names import MODELLED
from tracker.ops.conv2d import CONV, IMPLICIT_KERNELS, bwd_data_implicit, bwd_weight_implicit, fwd_implicit, where
from tracker.ops.gemm import BIAS_GRAD, DEFAULT, SPLITK_REDUCE, Gemm, Tile, bias_grad, tiled
from tracker.ops.launch import THREADS, Arrays, Backend, Struct, blocks
from tracker.ops.registry import launch

SOURCE = "winograd.cu"
# variant -> m: each transformed tile gives m x m outputs; the model names the algorithm winograd_f<m>
OUTPUT_TILES = {"winograd": 2, "winograd_f4": 4}
FILTERS = (3, 5)  # r: the square filter sizes it runs
POINTS = (0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5)  # Cook-Toom interpolation points, then infinity


def alpha(m: int, r: int) -> int:
    """The transformed tile's side, the kernels' compile-time size (winograd_*_a<alpha>)."""
    return m + r - 1


def kernels(m: int) -> tuple[str, ...]:
    """F(mxm, rxr)'s transform kernels, for each filter size."""
    return tuple(f"{SOURCE}:winograd_{part}_a{alpha(m, r)}" for r in FILTERS for part in ("filter", "input", "output"))


# The fused kernel (kernels/winograd.cu's winograd_fused_a4) is F(2x2,3x3): its m and r, written into it
FUSED_TILE, FUSED_FILTER = 2, 3
MODEL_TILES = {**OUTPUT_TILES, "winograd_fused": FUSED_TILE}  # every Winograd variant's m


def model_algorithm(variant: str) -> str:
    """The analytic model's name for a Winograd variant's algorithm (tracker/model/algorithms.py)."""
    return f"winograd_f{MODEL_TILES[variant]}"


def modelled(algorithm: str | None, conv_variant: str | None) -> str | None:
    """The model's name for what a conv phase of ours ran (``algorithm``: what its kernel names say,
    tracker/kernel_names.py): a Winograd's by its variant's tile."""
    if algorithm in ("winograd_nonfused", "winograd") and conv_variant in MODEL_TILES:
        return model_algorithm(conv_variant)
    return MODELLED.get(algorithm or "")


def applies(w_shape: tuple[int, ...], stride: int, pad: int) -> bool:
    """Winograd runs stride-1 square 3x3 and 5x5 filters, padded by at most r - 1 (the data
    gradient pads by r - 1 - pad)."""
    r = w_shape[2]
    return stride == 1 and tuple(w_shape[2:]) == (r, r) and r in FILTERS and 0 <= pad <= r - 1


@cache
def matrices(m: int, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A^T: m x alpha, G: alpha x r, B^T: alpha x alpha) of F(m, r) by Cook-Toom, float64: A^T and
    G from the points, B^T solved so that A^T ((G g) * (B^T d)) is the correlation of d and g for
    every d and g (it is exact: checked)."""
    alpha = m + r - 1
    points = np.array(POINTS[: alpha - 1])
    at, g = np.zeros((m, alpha)), np.zeros((alpha, r))
    for j, p in enumerate(points):
        at[:, j] = p ** np.arange(m)
        g[j] = p ** np.arange(r) / np.prod([p - q for i, q in enumerate(points) if i != j])
    at[m - 1, alpha - 1] = g[alpha - 1, r - 1] = 1.0  # the point at infinity
    system = np.array([at[i] * g[:, k] for i in range(m) for k in range(r)])  # (i, k) x j
    target = np.array([[1.0 if t == i + k else 0.0 for t in range(alpha)] for i in range(m) for k in range(r)])
    bt = np.linalg.lstsq(system, target, rcond=None)[0]
    if not np.allclose(system @ bt, target, atol=1e-9):
        raise ValueError(f"no exact Winograd F({m},{r}) from points {points}")
    return at, g, bt


def _constants(m: int, r: int) -> np.ndarray:
    """c_wino for F(m, r): B^T, G and A^T, each zero-padded to alpha x alpha, row-major."""
    at, g, bt = matrices(m, r)
    side = alpha(m, r)
    padded = [np.pad(mat, ((0, side - mat.shape[0]), (0, side - mat.shape[1]))) for mat in (bt, g, at)]
    return np.concatenate([mat.ravel() for mat in padded]).astype(np.float32)


def _shape(
    N: int,
    C: int,
    H: int,
    W: int,
    P: int,
    Q: int,
    pad: int,
    TH: int,
    TW: int,
    m: int,
    r: int,
    extent: int,
    matrix: int = 0,
) -> Struct:
    """The kernels' WinoShape (kernels/winograd.cu)."""
    names = ("N", "C", "H", "W", "P", "Q", "pad", "TH", "TW", "m", "r", "extent", "matrix")
    return Struct("WinoShape", tuple((n, "i") for n in names), (N, C, H, W, P, Q, pad, TH, TW, m, r, extent, matrix))


def _winograd(b: Backend, m: int, x: Any, w: Any, flip: bool, bias: Any, out: Any, pad: int, tile: Tile) -> None:
    """out (N x M x P x Q) = the stride-1 r x r convolution of x (N x Kc x H x W) padded by pad,
    in m x m output tiles."""
    N, Kc, H, W = x.shape
    M, P, Q = out.shape[1:]
    r = w.shape[2]
    side = alpha(m, r)
    TH, TW = math.ceil(P / m), math.ceil(Q / m)
    cols, points = N * TH * TW, side * side
    shape = _shape(N, Kc, H, W, P, Q, pad, TH, TW, m, r, extent=side)
    U, V, products = b.empty((points, M, Kc)), b.empty((points, Kc, cols)), b.empty((points, M, cols))
    b.to_constant(SOURCE, "c_wino", b.asarray(_constants(m, r)))  # a device array, as CuPy needs
    b.launch(SOURCE, f"winograd_filter_a{side}", (blocks(M * Kc),), (THREADS,), (w, U, M, Kc, r, int(flip)))
    b.launch(SOURCE, f"winograd_input_a{side}", (blocks(Kc * cols),), (THREADS,), (x, V, shape))
    Gemm(
        "gemm_nn_batched", M=M, N=cols, K=Kc, lda=Kc, ldb=cols, batch=points, stride_a=M * Kc, stride_b=Kc * cols
    ).launch(b, U, V, products, tile=tile)
    b.launch(SOURCE, f"winograd_output_a{side}", (blocks(M * cols),), (THREADS,), (products, bias, out, shape, M))


def _weight_gradient(b: Backend, m: int, x: Any, dy: Any, dw: Any, pad: int, tile: Tile) -> None:
    """dw (K x C x r x r) = the correlation of x (N x C x H x W, padded by pad) with dy (N x K x P x
    Q): F(rxr, mxm), dy's m x m tiles the filter, each channel pair's alpha^2 products summed over
    every image's tiles by a GEMM a point, all in one launch (C x tiles times tiles x K: split-K)."""
    N, C, H, W = x.shape
    K, P, Q = dy.shape[1:]
    r = dw.shape[2]
    side = alpha(m, r)  # F(r, m): r outputs (the filter's taps) from m-long tiles of dy
    TH, TW = math.ceil(P / m), math.ceil(Q / m)
    cols, points = N * TH * TW, side * side
    V, U, products = b.empty((points, C, cols)), b.empty((points, K, cols)), b.empty((points, C, K))
    b.to_constant(SOURCE, "c_wino", b.asarray(_constants(r, m)))
    b.launch(
        SOURCE,
        f"winograd_input_a{side}",
        (blocks(C * cols),),
        (THREADS,),
        (x, V, _shape(N, C, H, W, P, Q, pad, TH, TW, m, r, extent=side)),
    )  # B^T d B
    b.launch(
        SOURCE,
        f"winograd_input_a{side}",
        (blocks(K * cols),),
        (THREADS,),
        (dy, U, _shape(N, K, P, Q, P, Q, 0, TH, TW, m, r, extent=m, matrix=points)),
    )  # G t G^T
    Gemm(
        "gemm_nt_batched", M=C, N=K, K=cols, lda=cols, ldb=cols, batch=points, stride_a=C * cols, stride_b=K * cols
    ).launch(b, V, U, products, tile=tile)
    # each (channel, output) pair an 'image' of one r x r tile: written at dw[k][c]
    b.launch(
        SOURCE,
        f"winograd_output_a{side}",
        (blocks(C * K),),
        (THREADS,),
        (products, None, dw, _shape(K, C, r, r, r, r, 0, 1, 1, r, m, extent=side), C),
    )


def _fwd(b: Backend, a: Arrays, stride: int, pad: int, m: int, tile: Tile = DEFAULT) -> None:
    if not applies(a.w.shape, stride, pad):
        return fwd_implicit(b, a, stride, pad, tile=tile)
    _winograd(b, m, a.x, a.w, False, a.bias, a.y, pad, tile)


def _bwd_data(b: Backend, a: Arrays, stride: int, pad: int, m: int, tile: Tile = DEFAULT) -> None:
    if not applies(a.w.shape, stride, pad):
        return bwd_data_implicit(b, a, stride, pad, tile=tile)
    _winograd(b, m, a.dy, a.w, True, None, a.dx, a.w.shape[2] - 1 - pad, tile)


def _bwd_weight(b: Backend, a: Arrays, stride: int, pad: int, m: int, tile: Tile = DEFAULT) -> None:
    if not applies(a.dw.shape, stride, pad):
        return bwd_weight_implicit(b, a, stride, pad, tile=tile)
    _weight_gradient(b, m, a.x, a.dy, a.dw, pad, tile)
    if a.db is not None:
        N, K, P, Q = a.dy.shape
        bias_grad(b, a.dy, None, a.db, N, K, P * Q)


# Measured on the emulation (tests/test_winograd.py), Winograd's error is up to 14x the implicit
# GEMM's (the 5x5 weight gradient, F(5x5,2x2)); Lavin & Gray's F(4x4,3x3) errs 3x more than direct:
# the selftest holds both tiles to 10x the op's bound.
ERROR_SCALE = 10.0

for _name, _m in OUTPUT_TILES.items():
    _elsewhere = (
        f"F({_m}x{_m},3x3) and F({_m}x{_m},5x5) for stride-1 filters; any other layer runs the shared "
        "variant's implicit GEMM"
    )
    CONV.add(
        _name,
        error_scale=ERROR_SCALE,
        applies=where(applies),
        fwd=tiled(partial(_fwd, m=_m), *kernels(_m), "gemm.cu:gemm_nn_batched", IMPLICIT_KERNELS[0], note=_elsewhere),
        bwd_data=tiled(
            partial(_bwd_data, m=_m), *kernels(_m), "gemm.cu:gemm_nn_batched", IMPLICIT_KERNELS[1], note=_elsewhere
        ),
        bwd_weight=tiled(
            partial(_bwd_weight, m=_m),
            *kernels(_m),
            "gemm.cu:gemm_nt_batched",
            IMPLICIT_KERNELS[2],
            *BIAS_GRAD,
            note=f"F(3x3,{_m}x{_m}) and F(5x5,{_m}x{_m}) on dy's tiles for stride-1 filters; any "
            "other layer runs the shared variant's implicit GEMM",
        ),
    )


# The fused F(2x2,3x3)'s CTA: its outputs, tiles and threads, as kernels/winograd.cu's WF_M, WF_N, WF_THREADS
# are written (tests/test_ops.py holds the two alike)
FUSED_M, FUSED_N, FUSED_THREADS = 32, 32, 256
FUSED_ALPHA = alpha(FUSED_TILE, FUSED_FILTER)
_FUSED_KERNELS = (f"winograd_filter_a{FUSED_ALPHA}", f"winograd_fused_a{FUSED_ALPHA}")  # what _fused launches
_FUSED_SOURCES = tuple(f"{SOURCE}:{kernel}" for kernel in _FUSED_KERNELS)  # as the registry names them


def fused_applies(w_shape: tuple[int, ...], stride: int, pad: int) -> bool:
    """The fused kernel runs what ``applies`` allows with a 3x3 filter."""
    return applies(w_shape, stride, pad) and w_shape[2] == FUSED_FILTER


def _fused(b: Backend, x: Any, w: Any, flip: bool, bias: Any, out: Any, pad: int) -> None:
    """out (N x M x P x Q) = the stride-1 3x3 convolution of x padded by pad: the filter transform,
    then one kernel for the rest (``winograd_fused_a4``)."""
    N, Kc, H, W = x.shape
    M, P, Q = out.shape[1:]
    m, r, a = FUSED_TILE, FUSED_FILTER, FUSED_ALPHA
    TH, TW = math.ceil(P / m), math.ceil(Q / m)
    U = b.empty((a * a, M, Kc))
    b.to_constant(SOURCE, "c_wino", b.asarray(_constants(m, r)))
    b.launch(SOURCE, _FUSED_KERNELS[0], (blocks(M * Kc),), (THREADS,), (w, U, M, Kc, r, int(flip)))
    b.launch(
        SOURCE,
        _FUSED_KERNELS[1],
        (math.ceil(N * TH * TW / FUSED_N), math.ceil(M / FUSED_M)),
        (FUSED_THREADS,),
        (x, U, bias, out, _shape(N, Kc, H, W, P, Q, pad, TH, TW, m, r, extent=a), M),
    )


def _fused_fwd(b: Backend, a: Arrays, stride: int, pad: int, tile: Tile = DEFAULT) -> None:
    if not fused_applies(a.w.shape, stride, pad):
        return fwd_implicit(b, a, stride, pad, tile=tile)
    _fused(b, a.x, a.w, False, a.bias, a.y, pad)


def _fused_bwd_data(b: Backend, a: Arrays, stride: int, pad: int, tile: Tile = DEFAULT) -> None:
    if not fused_applies(a.w.shape, stride, pad):
        return bwd_data_implicit(b, a, stride, pad, tile=tile)
    _fused(b, a.dy, a.w, True, None, a.dx, FUSED_FILTER - 1 - pad)


_FUSED = (
    "F(2x2,3x3) in one kernel for stride-1 3x3 filters (the input transform in its load stage, the output "
    "transform in its epilogue); any other layer runs the shared variant's implicit GEMM"
)
CONV.add(
    "winograd_fused",
    error_scale=ERROR_SCALE,
    applies=where(fused_applies, ("fwd", "bwd_data")),  # its weight gradient is winograd's
    fwd=launch(_fused_fwd, *_FUSED_SOURCES, IMPLICIT_KERNELS[0], SPLITK_REDUCE, note=_FUSED),
    bwd_data=launch(_fused_bwd_data, *_FUSED_SOURCES, IMPLICIT_KERNELS[1], SPLITK_REDUCE, note=_FUSED),
    bwd_weight=tiled(
        partial(_bwd_weight, m=FUSED_TILE),
        *kernels(FUSED_TILE),
        "gemm.cu:gemm_nt_batched",
        IMPLICIT_KERNELS[2],
        *BIAS_GRAD,
        note="winograd's: F(3x3,2x2) and F(5x5,2x2) on dy's tiles for stride-1 filters; any other "
        "layer runs the shared variant's implicit GEMM",
    ),
)
