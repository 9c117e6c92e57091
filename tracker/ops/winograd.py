"""conv2d's ``winograd`` variant (kernels/winograd.cu): Winograd F(2x2, rxr), non-fused, for
stride-1 square 3x3 and 5x5 convolutions (AlexNet's conv2-5), forward and data gradient.

Each phase is the filter transform, the input transform, alpha^2 GEMMs on the tuned GEMM core
(``gemm_nn``: one per point of the alpha x alpha transformed tile, outputs x channels times
channels x tiles; alpha = 4 for 3x3, 6 for 5x5) and the output transform. The transform
matrices are derived here by Cook-Toom (``matrices``, points 0, 1, -1, 2, -2: Lavin & Gray's)
and checked to reproduce the correlation exactly. The data gradient is a stride-1 convolution
of dy padded by r - 1 - pad with the filters turned and their channels swapped. Where the
algorithm does not apply (a stride above 1: conv1) and for the weight gradient, the launch runs
the shared variant's implicit GEMM, as its note says; ``tracker model --algorithm winograd_f2``
prices the same choice.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from tracker.ops.conv2d import _IMPLICIT, CONV, _bwd_data_implicit, _bwd_weight_implicit, _fwd_implicit
from tracker.ops.gemm import BIAS_GRAD, DEFAULT, Gemm, Tile, tiled
from tracker.ops.launch import THREADS, Arrays, Backend, Struct, blocks

SOURCE = "winograd.cu"
OUTPUT_TILE = 2  # m: each transformed tile gives m x m outputs (F(2x2, rxr): the most accurate)
ALPHAS = {3: 4, 5: 6}  # filter size -> alpha = m + r - 1, the kernels' compile-time tile
POINTS = (0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5)  # Cook-Toom interpolation points, then infinity
KERNELS = tuple(f"{SOURCE}:winograd_{part}_a{alpha}" for alpha in ALPHAS.values()
                for part in ("filter", "input", "output"))


def applies(w_shape: tuple[int, ...], stride: int, pad: int) -> bool:
    """F(2x2, rxr) runs stride-1 square 3x3 and 5x5 filters, padded by at most r - 1 (the data
    gradient pads by r - 1 - pad)."""
    r = w_shape[2]
    return stride == 1 and tuple(w_shape[2:]) == (r, r) and r in ALPHAS and 0 <= pad <= r - 1


@lru_cache(maxsize=None)
def matrices(m: int, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A^T: m x alpha, G: alpha x r, B^T: alpha x alpha) of F(m, r) by Cook-Toom, float64: A^T and
    G from the points, B^T solved so that A^T ((G g) * (B^T d)) is the correlation of d and g for
    every d and g (it is exact: checked)."""
    alpha = m + r - 1
    points = np.array(POINTS[:alpha - 1])
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


def _constants(r: int) -> np.ndarray:
    """c_wino for alpha: B^T, G and A^T, each zero-padded to alpha x alpha, row-major."""
    at, g, bt = matrices(OUTPUT_TILE, r)
    alpha = ALPHAS[r]
    padded = [np.pad(mat, ((0, alpha - mat.shape[0]), (0, alpha - mat.shape[1]))) for mat in (bt, g, at)]
    return np.concatenate([mat.ravel() for mat in padded]).astype(np.float32)


def _winograd(b: Backend, x: Any, w: Any, flip: bool, bias: Any, out: Any, pad: int, tile: Tile) -> None:
    """out (N x M x P x Q) = the stride-1 r x r convolution of x (N x Kc x H x W) padded by pad."""
    N, Kc, H, W = x.shape
    M, P, Q = out.shape[1:]
    r, m = w.shape[2], OUTPUT_TILE
    alpha = ALPHAS[r]
    TH, TW = math.ceil(P / m), math.ceil(Q / m)
    cols, points = N * TH * TW, alpha * alpha
    shape = Struct("WinoShape", tuple((n, "i") for n in ("N", "C", "H", "W", "P", "Q", "pad", "TH", "TW", "m", "r")),
                   (N, Kc, H, W, P, Q, pad, TH, TW, m, r))
    U, V, products = b.empty((points, M, Kc)), b.empty((points, Kc, cols)), b.empty((points, M, cols))
    b.to_constant(SOURCE, "c_wino", _constants(r))
    b.launch(SOURCE, f"winograd_filter_a{alpha}", (blocks(M * Kc),), (THREADS,), (w, U, M, Kc, r, int(flip)))
    b.launch(SOURCE, f"winograd_input_a{alpha}", (blocks(Kc * cols),), (THREADS,), (x, V, shape))
    for point in range(points):
        Gemm("gemm_nn", M=M, N=cols, K=Kc, lda=Kc, ldb=cols).launch(b, U[point], V[point], products[point], tile=tile)
    b.launch(SOURCE, f"winograd_output_a{alpha}", (blocks(M * cols),), (THREADS,), (products, bias, out, shape, M))


def _fwd(b: Backend, a: Arrays, stride: int, pad: int, tile: Tile = DEFAULT) -> None:
    if not applies(a.w.shape, stride, pad):
        return _fwd_implicit(b, a, stride, pad, tile=tile)
    _winograd(b, a.x, a.w, False, a.bias, a.y, pad, tile)


def _bwd_data(b: Backend, a: Arrays, stride: int, pad: int, tile: Tile = DEFAULT) -> None:
    if not applies(a.w.shape, stride, pad):
        return _bwd_data_implicit(b, a, stride, pad, tile=tile)
    _winograd(b, a.dy, a.w, True, None, a.dx, a.w.shape[2] - 1 - pad, tile)


ELSEWHERE = "F(2x2,3x3) and F(2x2,5x5) for stride-1 filters; any other layer runs the shared variant's implicit GEMM"
CONV.add("winograd",
         fwd=tiled(_fwd, *KERNELS, "gemm.cu:gemm_nn", _IMPLICIT[0], note=ELSEWHERE),
         bwd_data=tiled(_bwd_data, *KERNELS, "gemm.cu:gemm_nn", _IMPLICIT[1], note=ELSEWHERE),
         bwd_weight=tiled(_bwd_weight_implicit, _IMPLICIT[2], BIAS_GRAD,
                          note="no Winograd weight gradient yet: the shared variant's implicit GEMM"))
