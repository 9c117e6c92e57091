"""conv2d's ``fft`` variant (kernels/fft.cu): FFT tiling, paper 004's FFT algorithm (cuDNN's
FFT_TILING), for stride-1 square filters, all three phases.

Each phase transforms the filters and N x N tiles of the input (N the power of two that holds a
whole output row plus the filter's overhang, as tracker/model/algorithms.py's ``fft_side``
chooses and prices it; past 32, tiles that overlap by r - 1), multiplies per frequency on the tuned
GEMM core (``gemm_nn_batched``: one real GEMM a frequency, the complex product in its real 2 x 2
block form, over the N (N/2 + 1) frequencies a real tile's half spectrum holds, all in one
launch), and transforms each tile's products back. A transform's block holds ``TILES[n]``
consecutive tiles of one channel (columns of a frequency's plane), so that its warps store one
frequency of consecutive tiles, whole lines (the output transform: load). The data gradient is
a stride-1 convolution of dy padded by r - 1 - pad with the filters turned and their channels
swapped; the weight gradient correlates the input with dy, whose tiles play the filter
(``_weight_gradient``). Where it does not apply (a stride above 1: conv1), the launch runs the
shared variant's implicit GEMM, as its note says.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracker.model.algorithms import FFT_TILE, fft_side
from tracker.ops.conv2d import CONV, IMPLICIT_KERNELS, bwd_data_implicit, bwd_weight_implicit, fwd_implicit, where
from tracker.ops.gemm import BIAS_GRAD, DEFAULT, Gemm, Tile, bias_grad, tiled
from tracker.ops.launch import Arrays, Backend, Struct
from tracker.ops.registry import Case

SOURCE = "fft.cu"
SIZES = (2, 4, 8, 16, FFT_TILE)  # every tile side fft_side chooses (fft_*_n2 .. fft_*_n32)
# The tiles (columns of a frequency's plane) a transform's block holds, by tile side, as -D
# FFT_TILES_N<n>: a warp's lanes on 32 consecutive tiles, 256 threads (n/2 a tile); at 32 points
# 32 tiles of 512 threads, in more dynamic shared memory (``shared_bytes``) than the 48 KB a block
# has without opting in
TILES = {2: 256, 4: 128, 8: 64, 16: 32, FFT_TILE: 32}
DEFINES = {f"FFT_TILES_N{n}": tiles for n, tiles in TILES.items()}
TWIDDLE_N = 32  # kernels/fft.cu's table: cos and -sin of 2 pi k / 32, k < 16
TWIDDLES = np.concatenate(
    [np.cos(2 * np.pi * np.arange(16) / TWIDDLE_N), -np.sin(2 * np.pi * np.arange(16) / TWIDDLE_N)]
).astype(np.float32)
KERNELS = tuple(f"{SOURCE}:fft_{part}_n{n}" for n in SIZES for part in ("filter", "input", "output"))


def applies(w_shape: tuple[int, ...], stride: int, pad: int) -> bool:
    """FFT tiling runs stride-1 square filters from 2x2 up to those that leave a 32-point tile room
    for outputs, padded by at most r - 1 (the data gradient pads by r - 1 - pad)."""
    r = w_shape[2]
    return stride == 1 and tuple(w_shape[2:]) == (r, r) and 2 <= r < FFT_TILE and 0 <= pad <= r - 1


STACKED, SIDE, BLOCK = 0, 1, 2  # kernels/fft.cu's Layout: how a frequency's complex values lie


def _shape(*values: int) -> Struct:
    """The kernels' FftShape (kernels/fft.cu)."""
    names = ("images", "C", "H", "W", "P", "Q", "pad", "TH", "TW", "step", "extent", "layout")
    return Struct("FftShape", tuple((name, "i") for name in names), values)


WINDOW_BYTES = 32  # kernels/fft.cu's Window: where a tile lies in global memory (a long long, six ints)


def shared_bytes(n: int) -> int:
    """A transform block's dynamic shared memory (kernels/fft.cu's staging): its TILES[n] tiles'
    windows, then the tiles, n * n + 1 floats apart (odd: 32 lanes on 32 tiles touch 32 banks)."""
    return TILES[n] * (WINDOW_BYTES + 4 * (n * n + 1))


def _transform(b: Backend, kernel: str, n: int, tiles: int, planes: int, args: tuple) -> None:
    """Launches fft_<kernel>_n<n> over ``planes`` planes (the grid's second side) of ``tiles`` n x n
    tiles (filter pairs): TILES[n] a block, n/2 threads a tile, in shared_bytes(n)."""
    grid = (math.ceil(tiles / TILES[n]), planes)
    b.launch(SOURCE, f"fft_{kernel}_n{n}", grid, (TILES[n] * n // 2,), args, shared_bytes=shared_bytes(n))


def _tiling(images: int, P: int, Q: int, r: int) -> tuple[int, int, int, int, int, int]:
    """(n, step, TH, TW, tiles, frequencies): n x n tiles of step x step outputs (overlap-save)
    over P x Q outputs of an r x r filter, TH x TW of them an image, and a real tile's half
    spectrum."""
    n = fft_side(P, Q, r)
    step = n - r + 1
    TH, TW = math.ceil(P / step), math.ceil(Q / step)
    return n, step, TH, TW, images * TH * TW, n * (n // 2 + 1)


def _products(cols: int, freqs: int, Kc: int, M: int) -> Gemm:
    """The batched GEMM of ``freqs`` frequencies, each 2M x 2Kc filter values (a complex product's
    real 2 x 2 block form) times 2Kc x ``cols`` tiles' values."""
    return Gemm(
        "gemm_nn_batched",
        M=2 * M,
        N=cols,
        K=2 * Kc,
        lda=2 * Kc,
        ldb=cols,
        batch=freqs,
        stride_a=4 * M * Kc,
        stride_b=2 * Kc * cols,
    )


def _weight_products(cols: int, freqs: int, C: int, K: int) -> Gemm:
    """The weight gradient's batched GEMM of ``freqs`` frequencies, each the input's C x 2 ``cols``
    values times dy's 2 ``cols`` x 2K."""
    return Gemm(
        "gemm_nt_batched",
        M=C,
        N=2 * K,
        K=2 * cols,
        lda=2 * cols,
        ldb=2 * cols,
        batch=freqs,
        stride_a=2 * C * cols,
        stride_b=4 * K * cols,
    )


def gemm_at(case: Case, phase: str) -> Gemm | None:
    """The batched GEMM fft launches at a conv case's phase, as its launchers size it from the
    arrays; None where FFT tiling does not apply (the implicit GEMM runs)."""
    images, C, H, W = case.shapes["x"]
    K, _, r, _ = case.shapes["w"]
    stride, pad = case.params["stride"], case.params["pad"]
    if not applies(case.shapes["w"], stride, pad):
        return None
    P, Q = H + 2 * pad - r + 1, W + 2 * pad - r + 1  # stride 1, a square filter
    if phase == "bwd_data":  # dy (K channels, P x Q) to dx (C channels, H x W)
        cols, freqs = _tiling(images, H, W, r)[4:]
        return _products(cols, freqs, K, C)
    cols, freqs = _tiling(images, P, Q, r)[4:]
    return _products(cols, freqs, C, K) if phase == "fwd" else _weight_products(cols, freqs, C, K)


def _fft(b: Backend, x: Any, w: Any, flip: bool, bias: Any, out: Any, pad: int, tile: Tile) -> None:
    """out (images x M x P x Q) = the stride-1 r x r convolution of x (images x Kc x H x W) padded by pad."""
    images, Kc, H, W = x.shape
    M, P, Q = out.shape[1:]
    r = w.shape[2]
    n, step, TH, TW, cols, freqs = _tiling(images, P, Q, r)
    shape = _shape(images, Kc, H, W, P, Q, pad, TH, TW, step, n, STACKED)
    Wb, X, Y = b.empty((freqs, 2 * M, 2 * Kc)), b.empty((freqs, 2 * Kc, cols)), b.empty((freqs, 2 * M, cols))
    b.to_constant(SOURCE, "c_twiddle", b.asarray(TWIDDLES))  # a device array, as CuPy needs
    _transform(b, "filter", n, M * Kc, 1, (w, Wb, M, Kc, r, int(flip)))
    _transform(b, "input", n, cols, Kc, (x, X, shape))
    _products(cols, freqs, Kc, M).launch(b, Wb, X, Y, tile=tile)
    _transform(b, "output", n, cols, M, (Y, bias, out, shape, M))


def _weight_gradient(b: Backend, x: Any, dy: Any, dw: Any, pad: int, tile: Tile) -> None:
    """dw (K x C x r x r) = the correlation of x (images x C x H x W, padded by pad) with dy: dy's
    step x step tiles play the filter, Z = X conj(D) summed over every image's tiles by one real
    GEMM a frequency, all in one launch (C x 2 tiles times 2 tiles x 2K: split-K), each pair's inverse
    DFT cut to r x r."""
    images, C, H, W = x.shape
    K, P, Q = dy.shape[1:]
    r = dw.shape[2]
    n, step, TH, TW, cols, freqs = _tiling(images, P, Q, r)
    X, D, Z = b.empty((freqs, C, 2 * cols)), b.empty((freqs, 2 * K, 2 * cols)), b.empty((freqs, C, 2 * K))
    b.to_constant(SOURCE, "c_twiddle", b.asarray(TWIDDLES))
    _transform(b, "input", n, cols, C, (x, X, _shape(images, C, H, W, P, Q, pad, TH, TW, step, n, SIDE)))
    _transform(b, "input", n, cols, K, (dy, D, _shape(images, K, P, Q, P, Q, 0, TH, TW, step, step, BLOCK)))
    _weight_products(cols, freqs, C, K).launch(b, X, D, Z, tile=tile)
    # each (channel, output) pair an 'image' of one r x r tile: written at dw[k][c]
    _transform(b, "output", n, K, C, (Z, None, dw, _shape(K, C, r, r, r, r, 0, 1, 1, r, n, SIDE), C))


def _fwd(b: Backend, a: Arrays, stride: int, pad: int, tile: Tile = DEFAULT) -> None:
    if not applies(a.w.shape, stride, pad):
        return fwd_implicit(b, a, stride, pad, tile=tile)
    _fft(b, a.x, a.w, False, a.bias, a.y, pad, tile)


def _bwd_data(b: Backend, a: Arrays, stride: int, pad: int, tile: Tile = DEFAULT) -> None:
    if not applies(a.w.shape, stride, pad):
        return bwd_data_implicit(b, a, stride, pad, tile=tile)
    _fft(b, a.dy, a.w, True, None, a.dx, a.w.shape[2] - 1 - pad, tile)


def _bwd_weight(b: Backend, a: Arrays, stride: int, pad: int, tile: Tile = DEFAULT) -> None:
    if not applies(a.dw.shape, stride, pad):
        return bwd_weight_implicit(b, a, stride, pad, tile=tile)
    _weight_gradient(b, a.x, a.dy, a.dw, pad, tile)
    if a.db is not None:
        images, K, P, Q = a.dy.shape
        bias_grad(b, a.dy, None, a.db, images, K, P * Q)


CONV.defines = {**CONV.defines, **DEFINES}
ELSEWHERE = "NxN FFT tiles (N up to 32) for stride-1 filters; any other layer runs the shared variant's implicit GEMM"
CONV.add(
    "fft",
    applies=where(applies),
    gemm=gemm_at,
    fwd=tiled(_fwd, *KERNELS, "gemm.cu:gemm_nn_batched", IMPLICIT_KERNELS[0], note=ELSEWHERE),
    bwd_data=tiled(_bwd_data, *KERNELS, "gemm.cu:gemm_nn_batched", IMPLICIT_KERNELS[1], note=ELSEWHERE),
    bwd_weight=tiled(_bwd_weight, *KERNELS, "gemm.cu:gemm_nt_batched", IMPLICIT_KERNELS[2], *BIAS_GRAD, note=ELSEWHERE),
)
