"""conv2d's ``fft`` variant (kernels/fft.cu): FFT tiling, paper 004's FFT algorithm (cuDNN's
FFT_TILING), for stride-1 square filters: forward and data gradient.

Each phase transforms the filters and N x N tiles of the input (N the power of two that holds a
whole output row plus the filter's overhang, as tracker/model/algorithms.py's ``fft_side``
chooses and prices it; past 32, tiles that overlap by r - 1), multiplies per frequency on the tuned GEMM core
(``gemm_nn``: one real GEMM a frequency, the complex product in its real 2 x 2 block form, over
the N (N/2 + 1) frequencies a real tile's half spectrum holds), and transforms each tile's
products back. The data gradient is a stride-1 convolution of dy padded by r - 1 - pad with the
filters turned and their channels swapped. Where it does not apply (a stride above 1: conv1)
and for the weight gradient, the launch runs the shared variant's implicit GEMM, as its note
says.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracker.model.algorithms import FFT_TILE, fft_side
from tracker.ops.conv2d import _IMPLICIT, CONV, _bwd_data_implicit, _bwd_weight_implicit, _fwd_implicit
from tracker.ops.gemm import BIAS_GRAD, DEFAULT, Gemm, Tile, tiled
from tracker.ops.launch import Arrays, Backend, Struct

SOURCE = "fft.cu"
SIZES = (2, 4, 8, 16, FFT_TILE)  # every tile side fft_side chooses (fft_*_n2 .. fft_*_n32)
TWIDDLE_N = 32  # kernels/fft.cu's table: cos and -sin of 2 pi k / 32, k < 16
TWIDDLES = np.concatenate([np.cos(2 * np.pi * np.arange(16) / TWIDDLE_N),
                           -np.sin(2 * np.pi * np.arange(16) / TWIDDLE_N)]).astype(np.float32)
KERNELS = tuple(f"{SOURCE}:fft_{part}_n{n}" for n in SIZES for part in ("filter", "input", "output"))


def applies(w_shape: tuple[int, ...], stride: int, pad: int) -> bool:
    """FFT tiling runs stride-1 square filters from 2x2 up to those that leave a 32-point tile room
    for outputs, padded by at most r - 1 (the data gradient pads by r - 1 - pad)."""
    r = w_shape[2]
    return stride == 1 and tuple(w_shape[2:]) == (r, r) and 2 <= r < FFT_TILE and 0 <= pad <= r - 1


def _fft(b: Backend, x: Any, w: Any, flip: bool, bias: Any, out: Any, pad: int, tile: Tile) -> None:
    """out (images x M x P x Q) = the stride-1 r x r convolution of x (images x Kc x H x W) padded by pad."""
    images, Kc, H, W = x.shape
    M, P, Q = out.shape[1:]
    r = w.shape[2]
    n = fft_side(P, Q, r)
    step = n - r + 1
    TH, TW = math.ceil(P / step), math.ceil(Q / step)
    cols, freqs = images * TH * TW, n * (n // 2 + 1)
    names = ("images", "C", "H", "W", "P", "Q", "pad", "TH", "TW", "step")
    shape = Struct("FftShape", tuple((name, "i") for name in names), (images, Kc, H, W, P, Q, pad, TH, TW, step))
    Wb, X, Y = b.empty((freqs, 2 * M, 2 * Kc)), b.empty((freqs, 2 * Kc, cols)), b.empty((freqs, 2 * M, cols))
    b.to_constant(SOURCE, "c_twiddle", TWIDDLES)
    b.launch(SOURCE, f"fft_filter_n{n}", (M * Kc,), (n,), (w, Wb, M, Kc, r, int(flip)))
    b.launch(SOURCE, f"fft_input_n{n}", (cols, Kc), (n,), (x, X, shape))
    for f in range(freqs):
        Gemm("gemm_nn", M=2 * M, N=cols, K=2 * Kc, lda=2 * Kc, ldb=cols).launch(b, Wb[f], X[f], Y[f], tile=tile)
    b.launch(SOURCE, f"fft_output_n{n}", (cols, M), (n,), (Y, bias, out, shape, M))


def _fwd(b: Backend, a: Arrays, stride: int, pad: int, tile: Tile = DEFAULT) -> None:
    if not applies(a.w.shape, stride, pad):
        return _fwd_implicit(b, a, stride, pad, tile=tile)
    _fft(b, a.x, a.w, False, a.bias, a.y, pad, tile)


def _bwd_data(b: Backend, a: Arrays, stride: int, pad: int, tile: Tile = DEFAULT) -> None:
    if not applies(a.w.shape, stride, pad):
        return _bwd_data_implicit(b, a, stride, pad, tile=tile)
    _fft(b, a.dy, a.w, True, None, a.dx, a.w.shape[2] - 1 - pad, tile)


ELSEWHERE = "NxN FFT tiles (N up to 32) for stride-1 filters; any other layer runs the shared variant's implicit GEMM"
CONV.add("fft",
         fwd=tiled(_fwd, *KERNELS, "gemm.cu:gemm_nn", _IMPLICIT[0], note=ELSEWHERE),
         bwd_data=tiled(_bwd_data, *KERNELS, "gemm.cu:gemm_nn", _IMPLICIT[1], note=ELSEWHERE),
         bwd_weight=tiled(_bwd_weight_implicit, _IMPLICIT[2], BIAS_GRAD,
                          note="no FFT weight gradient yet: the shared variant's implicit GEMM"))
