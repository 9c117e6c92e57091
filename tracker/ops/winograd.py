"""conv2d's ``winograd`` variant (kernels/winograd.cu): Winograd F(2x2, 3x3), non-fused, for
stride-1 3x3 convolutions (AlexNet's conv3-5), forward and data gradient.

Each phase is the filter transform, the input transform, 16 GEMMs on the tuned GEMM core
(``gemm_nn``: one per point of the 4x4 transformed tile, outputs x channels times channels x
tiles) and the output transform. The data gradient is a stride-1 convolution of dy padded by
2 - pad with the filters turned and their channels swapped. Where the algorithm does not apply
(another filter size or stride: conv1, conv2) and for the weight gradient, the launch runs the
shared variant's implicit GEMM, as its note says; ``tracker model --algorithm winograd_f2``
prices the same choice.
"""

from __future__ import annotations

import math
from typing import Any

from tracker.ops.conv2d import CONV, _bwd_data_implicit, _bwd_weight_implicit, _fwd_implicit
from tracker.ops.gemm import BIAS_GRAD, DEFAULT, Gemm, Tile, tiled
from tracker.ops.launch import THREADS, Arrays, Backend, Struct, blocks

SOURCE = "winograd.cu"
POINTS = 16  # 4 x 4: the transformed tile of F(2x2, 3x3)
KERNELS = tuple(f"{SOURCE}:{k}" for k in ("winograd_filter", "winograd_input", "winograd_output"))
_IMPLICIT = ("conv2d.cu:conv2d_fwd_implicit", "conv2d.cu:conv2d_bwd_data_implicit", "conv2d.cu:conv2d_bwd_weight_implicit")


def applies(w_shape: tuple[int, ...], stride: int, pad: int) -> bool:
    """F(2x2, 3x3) runs stride-1 3x3 filters, padded by at most 2 (the data gradient pads by 2 - pad)."""
    return stride == 1 and tuple(w_shape[2:]) == (3, 3) and 0 <= pad <= 2


def _winograd(b: Backend, x: Any, w: Any, flip: bool, bias: Any, out: Any, pad: int, tile: Tile) -> None:
    """out (N x M x P x Q) = the stride-1 3x3 convolution of x (N x Kc x H x W) padded by pad."""
    N, Kc, H, W = x.shape
    M, P, Q = out.shape[1:]
    TH, TW = math.ceil(P / 2), math.ceil(Q / 2)
    cols = N * TH * TW
    shape = Struct("WinoShape", tuple((n, "i") for n in ("N", "C", "H", "W", "P", "Q", "pad", "TH", "TW")),
                   (N, Kc, H, W, P, Q, pad, TH, TW))
    U, V, products = b.empty((POINTS, M, Kc)), b.empty((POINTS, Kc, cols)), b.empty((POINTS, M, cols))
    b.launch(SOURCE, "winograd_filter", (blocks(M * Kc),), (THREADS,), (w, U, M, Kc, int(flip)))
    b.launch(SOURCE, "winograd_input", (blocks(Kc * cols),), (THREADS,), (x, V, shape))
    for point in range(POINTS):
        Gemm("gemm_nn", M=M, N=cols, K=Kc, lda=Kc, ldb=cols).launch(b, U[point], V[point], products[point], tile=tile)
    b.launch(SOURCE, "winograd_output", (blocks(M * cols),), (THREADS,), (products, bias, out, shape, M))


def _fwd(b: Backend, a: Arrays, stride: int, pad: int, tile: Tile = DEFAULT) -> None:
    if not applies(a.w.shape, stride, pad):
        return _fwd_implicit(b, a, stride, pad, tile=tile)
    _winograd(b, a.x, a.w, False, a.bias, a.y, pad, tile)


def _bwd_data(b: Backend, a: Arrays, stride: int, pad: int, tile: Tile = DEFAULT) -> None:
    if not applies(a.w.shape, stride, pad):
        return _bwd_data_implicit(b, a, stride, pad, tile=tile)
    _winograd(b, a.dy, a.w, True, None, a.dx, 2 - pad, tile)


ELSEWHERE = "F(2x2,3x3) for stride-1 3x3 filters; any other layer runs the shared variant's implicit GEMM"
CONV.add("winograd",
         fwd=tiled(_fwd, *KERNELS, "gemm.cu:gemm_nn", _IMPLICIT[0], note=ELSEWHERE),
         bwd_data=tiled(_bwd_data, *KERNELS, "gemm.cu:gemm_nn", _IMPLICIT[1], note=ELSEWHERE),
         bwd_weight=tiled(_bwd_weight_implicit, _IMPLICIT[2], BIAS_GRAD,
                          note="no Winograd weight gradient yet: the shared variant's implicit GEMM"))
