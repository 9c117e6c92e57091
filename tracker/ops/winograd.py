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

The input and output transforms run in blocks of a band of tile rows (or of whole planes where a
plane has few tiles: ``blocking``), whose image rows pass through shared memory so that their
global loads and stores are whole sectors.

The fused F(2x2, 3x3) (``winograd_fused``, after openCNN) is retired: on an H200 it was slower than
this non-fused ``winograd`` at every phase its kernel ran (conv3 fwd 2.606 ms against 1.556, conv4
fwd 3.492 against 1.917; tests/data/gpu-2026-11-26f-h200/RESULTS.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache, partial
from typing import Any

import numpy as np

from tracker.kernel_names import MODELLED
from tracker.ops.conv2d import CONV, IMPLICIT_KERNELS, bwd_data_implicit, bwd_weight_implicit, fwd_implicit, where
from tracker.ops.gemm import BIAS_GRAD, DEFAULT, Gemm, Tile, bias_grad, tiled
from tracker.ops.launch import THREADS, WAVE, Arrays, Backend, Struct, blocks, tiles
from tracker.ops.registry import Case

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


# every Winograd variant's m, and the retired fused F(2x2,3x3)'s: runs stored of it still price as winograd_f2
MODEL_TILES = {**OUTPUT_TILES, "winograd_fused": 2}


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


# A transform block's staged rows at most: 8 blocks of 256 threads share an SM's shared memory
BLOCK_BYTES = 24 * 1024
_SHAPE = ("N", "C", "H", "W", "P", "Q", "pad", "TH", "TW", "m", "r", "extent", "matrix", "planes", "band")


def blocking(planes: int, TH: int, TW: int, plane_bytes: Callable[[int], int]) -> tuple[int, int]:
    """How a transform of ``planes`` planes of TH x TW tiles is cut into blocks: (planes a block,
    tile rows of each). About THREADS tiles a block, fewer where the layer would make fewer than
    WAVE blocks: whole planes where a plane has no more tiles than that, else a band of whole tile
    rows of one plane; either within BLOCK_BYTES of shared memory unless one tile row needs more
    (``plane_bytes(rows)``: what a block stages of one plane for that many tile rows)."""
    per_block = min(THREADS, max(32, planes * TH * TW // WAVE))
    band = min(TH, max(1, per_block // TW))
    band = max((n for n in range(1, band + 1) if plane_bytes(n) <= BLOCK_BYTES), default=1)
    if band < TH:
        return 1, band
    return max(1, min(planes, per_block // (TH * TW), BLOCK_BYTES // plane_bytes(TH))), TH


def _staged_floats(part: str, m: int, W: int, Q: int, extent: int, rows: int) -> int:
    """What a transform block stages of one plane for ``rows`` tile rows (kernels/winograd.cu): the
    input rows its patches read (each extent - m rows into the next row of tiles), W wide; or its
    rows of the output, Q wide."""
    return (rows * m + extent - m) * W if part == "input" else rows * m * Q


def _transform(b: Backend, part: str, side: int, planes: int, args: Callable[[Struct], tuple], **shape: int) -> None:
    """Launches winograd_<part>_a<side> over ``planes`` planes (V's channels x images, or the
    products' outputs x images) of TH x TW tiles, in blocks of ``blocking``; ``shape``: the
    kernels' WinoShape (kernels/winograd.cu) less the blocking, which ``args`` places among the
    launch's arguments."""
    m, TH, TW, extent = shape["m"], shape["TH"], shape["TW"], shape["extent"]

    def floats(rows: int) -> int:
        return _staged_floats(part, m, shape["W"], shape["Q"], extent, rows)

    per, band = blocking(planes, TH, TW, lambda rows: 4 * floats(rows))
    values = {"matrix": 0, **shape, "planes": per, "band": band}
    struct = Struct("WinoShape", tuple((n, "i") for n in _SHAPE), tuple(values[n] for n in _SHAPE))
    b.launch(
        SOURCE,
        f"winograd_{part}_a{side}",
        (tiles(planes, per) * tiles(TH, band),),
        (min(THREADS, 32 * tiles(per * band * TW, 32)),),
        args(struct),
        shared_bytes=4 * per * floats(band),
    )


def _products(m: int, r: int, N: int, Kc: int, M: int, P: int, Q: int) -> Gemm:
    """F(mxm, rxr)'s batched GEMM for P x Q outputs of M channels from Kc, N images: a point's
    M x Kc transformed filters times its Kc x (N x tiles) transformed inputs, alpha^2 points."""
    cols, points = N * math.ceil(P / m) * math.ceil(Q / m), alpha(m, r) ** 2
    return Gemm(
        "gemm_nn_batched", M=M, N=cols, K=Kc, lda=Kc, ldb=cols, batch=points, stride_a=M * Kc, stride_b=Kc * cols
    )


def _weight_products(m: int, r: int, N: int, C: int, K: int, P: int, Q: int) -> Gemm:
    """F(rxr, mxm)'s batched GEMM for the K x C filters' gradient from N images of P x Q outputs: a
    point's K x (N x tiles) transformed dy times the transformed input's tiles x C, alpha^2 points."""
    cols, points = N * math.ceil(P / m) * math.ceil(Q / m), alpha(m, r) ** 2
    return Gemm(
        "gemm_nt_batched", M=K, N=C, K=cols, lda=cols, ldb=cols, batch=points, stride_a=K * cols, stride_b=C * cols
    )


def gemm_at(case: Case, phase: str, m: int) -> Gemm | None:
    """The batched GEMM F(mxm) launches at a conv case's phase, as its launchers size it from the
    arrays; None where Winograd does not apply (the implicit GEMM runs)."""
    N, C, H, W = case.shapes["x"]
    K, _, r, _ = case.shapes["w"]
    stride, pad = case.params["stride"], case.params["pad"]
    if not applies(case.shapes["w"], stride, pad):
        return None
    P, Q = H + 2 * pad - r + 1, W + 2 * pad - r + 1  # stride 1, a square filter
    if phase == "fwd":
        return _products(m, r, N, C, K, P, Q)
    if phase == "bwd_data":  # dy (K channels, P x Q) to dx (C channels, H x W)
        return _products(m, r, N, K, C, H, W)
    return _weight_products(m, r, N, C, K, P, Q)


def _winograd(b: Backend, m: int, x: Any, w: Any, flip: bool, bias: Any, out: Any, pad: int, tile: Tile) -> None:
    """out (N x M x P x Q) = the stride-1 r x r convolution of x (N x Kc x H x W) padded by pad,
    in m x m output tiles."""
    N, Kc, H, W = x.shape
    M, P, Q = out.shape[1:]
    r = w.shape[2]
    side = alpha(m, r)
    TH, TW = math.ceil(P / m), math.ceil(Q / m)
    gemm = _products(m, r, N, Kc, M, P, Q)
    cols, points = gemm.N, gemm.batch
    shape = {"N": N, "C": Kc, "H": H, "W": W, "P": P, "Q": Q, "pad": pad, "TH": TH, "TW": TW, "m": m, "r": r}
    U, V, products = b.empty((points, M, Kc)), b.empty((points, Kc, cols)), b.empty((points, M, cols))
    b.to_constant(SOURCE, "c_wino", b.asarray(_constants(m, r)))  # a device array, as CuPy needs
    b.launch(SOURCE, f"winograd_filter_a{side}", (blocks(M * Kc),), (THREADS,), (w, U, M, Kc, r, int(flip)))
    _transform(b, "input", side, Kc * N, lambda s: (x, V, s), **shape, extent=side)
    gemm.launch(b, U, V, products, tile=tile)
    _transform(b, "output", side, M * N, lambda s: (products, bias, out, s, M), **shape, extent=side)


def _weight_gradient(b: Backend, m: int, x: Any, dy: Any, dw: Any, pad: int, tile: Tile) -> None:
    """dw (K x C x r x r) = the correlation of x (N x C x H x W, padded by pad) with dy (N x K x P x
    Q): F(rxr, mxm), dy's m x m tiles the filter, each channel pair's alpha^2 products summed over
    every image's tiles by a GEMM a point, all in one launch (K x tiles times tiles x C: split-K)."""
    N, C, H, W = x.shape
    K, P, Q = dy.shape[1:]
    r = dw.shape[2]
    side = alpha(m, r)  # F(r, m): r outputs (the filter's taps) from m-long tiles of dy
    TH, TW = math.ceil(P / m), math.ceil(Q / m)
    gemm = _weight_products(m, r, N, C, K, P, Q)
    cols, points = gemm.K, gemm.batch
    V, U, products = b.empty((points, C, cols)), b.empty((points, K, cols)), b.empty((points, K, C))
    b.to_constant(SOURCE, "c_wino", b.asarray(_constants(r, m)))
    tiling = {"P": P, "Q": Q, "TH": TH, "TW": TW, "m": m, "r": r}
    _transform(b, "input", side, C * N, lambda s: (x, V, s), N=N, C=C, H=H, W=W, pad=pad, extent=side, **tiling)
    _transform(  # G t G^T
        b, "input", side, K * N, lambda s: (dy, U, s), N=N, C=K, H=P, W=Q, pad=0, extent=m, matrix=points, **tiling
    )
    gemm.launch(b, U, V, products, tile=tile)
    # a point's K x C products as one image of K*C planes of one r x r tile each: dw in its own order
    pair = {"N": 1, "C": K * C, "H": r, "W": r, "P": r, "Q": r, "pad": 0, "TH": 1, "TW": 1, "m": r, "r": m}
    _transform(b, "output", side, K * C, lambda s: (products, None, dw, s, K * C), **pair, extent=side)


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
        gemm=partial(gemm_at, m=_m),
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
