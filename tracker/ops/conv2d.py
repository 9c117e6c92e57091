"""conv2d (kernels/conv2d.cu): direct global-memory kernels, filters in constant memory, implicit
GEMM through shared memory (and fused with bias + ReLU), and explicit im2col + GEMM."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from tracker import reference as ref
from tracker.model.algorithms import col_images
from tracker.ops import gemm
from tracker.ops.gemm import BIAS_GRAD, DEFAULT, FUSED_BWD, FUSED_FWD, Gemm, Out, Tile, bias_grad, tiled
from tracker.ops.launch import THREADS, Arrays, Backend, Struct, blocks, tiles
from tracker.ops.registry import OPS, Case, Op, launch
from tracker.ops.selftest import REDUCTION, Check, f32, masked

SOURCE = "conv2d.cu"


# The widest filter side the implicit GEMM's loaders take, by dimensions: a slot keeps one bit a
# filter tap along each axis in one int (kernels/common.cuh's tap bits), 15 a side in 2-D, 10 in 3-D.
MAX_TAPS = {2: 15, 3: 10}
CONSTANT_FLOATS = 16384  # c_filters: the filters of a chunk of output channels, 64 KiB
DEFINES = {"CONSTANT_FLOATS": CONSTANT_FLOATS, "MAX_TAPS_2D": MAX_TAPS[2], "MAX_TAPS_3D": MAX_TAPS[3]}


def padded_past(taps: tuple[int, ...], pad: int) -> bool:
    """Whether ``pad`` is wider than a filter side: the weight gradient's count of the taps a window
    meets (common.cuh's taps_inside) does not take it."""
    return pad > min(taps)


def check_taps(taps: tuple[int, ...], pad: int) -> None:
    """Refuses a filter wider than the loaders' tap bits hold, and a padding wider than a filter side
    (padded_past)."""
    side = "x".join(map(str, taps))
    if max(taps) > MAX_TAPS[len(taps)]:
        raise ValueError(f"a {side} filter is over the kernels' {MAX_TAPS[len(taps)]} taps a side in {len(taps)}-D")
    if padded_past(taps, pad):
        raise ValueError(f"a padding of {pad} is wider than the {side} filter (the kernels take at most its side)")


def conv_shape(x_shape: tuple, w_shape: tuple, stride: int, pad: int) -> Struct:
    """The kernels' ConvShape of input ``x_shape`` (N, C, H, W) and filters ``w_shape`` (K, C, R, S)."""
    N, C, H, W = x_shape
    K, _, R, S = w_shape
    check_taps((R, S), pad)
    P, Q = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - S) // stride + 1
    names = ("N", "C", "H", "W", "K", "R", "S", "P", "Q", "stride", "pad")
    return Struct("ConvShape", tuple((n, "i") for n in names), (N, C, H, W, K, R, S, P, Q, stride, pad))


def where(
    rule: Callable[[tuple, int, int], bool], phases: tuple[str, ...] = ("fwd", "bwd_data", "bwd_weight")
) -> Callable[[Case, str], bool]:
    """A variant's ``applies`` from a rule on the filter's shape, stride and padding (a fast
    algorithm's: Winograd's, FFT's), at ``phases``."""
    return lambda case, phase: phase in phases and rule(case.shapes["w"], case.params["stride"], case.params["pad"])


def _chunks(s: Struct):
    """(k0, kc): output channels k0 .. k0 + kc - 1, as many as fit in constant memory at once."""
    _, C, _, _, K, R, S, *_ = s.values
    per_channel = C * R * S
    if per_channel > CONSTANT_FLOATS:
        raise ValueError(f"one output channel's filters ({per_channel} floats) exceed 64 KiB of constant memory")
    chunk = min(K, CONSTANT_FLOATS // per_channel)
    return [(k0, min(chunk, K - k0)) for k0 in range(0, K, chunk)]


# forward --------------------------------------------------------------------------------------


def _fwd_global(b: Backend, a: Arrays, stride: int, pad: int) -> None:
    s = conv_shape(a.x.shape, a.w.shape, stride, pad)
    N, C, H, W, K, R, S, P, Q, *_ = s.values
    b.launch(SOURCE, "conv2d_fwd_global", (blocks(N * K * P * Q),), (THREADS,), (a.x, a.w, a.bias, a.y, s))


def _fwd_constant(b: Backend, a: Arrays, stride: int, pad: int) -> None:
    s = conv_shape(a.x.shape, a.w.shape, stride, pad)
    N, C, H, W, K, R, S, P, Q, *_ = s.values
    for k0, kc in _chunks(s):
        b.to_constant(SOURCE, "c_filters", a.w[k0 : k0 + kc])
        b.launch(SOURCE, "conv2d_fwd_constant", (tiles(P * Q, THREADS), kc, N), (THREADS,), (a.x, a.bias, a.y, s, k0))


def fwd_implicit(b: Backend, a: Arrays, stride: int, pad: int, relu: bool = False, tile: Tile = DEFAULT) -> None:
    """One GEMM over the batch: M = K, N = images x P*Q, K = C*R*S."""
    s = conv_shape(a.x.shape, a.w.shape, stride, pad)
    N, C, H, W, K, R, S, P, Q, *_ = s.values
    gemm.run(
        b,
        SOURCE,
        "conv2d_fwd_implicit",
        tile,
        K,
        N * P * Q,
        C * R * S,
        lambda partial, chunk: (a.x, a.w, a.bias, a.y, partial, s, chunk, int(relu)),
        Out(a.y, P * Q, a.bias, bias_per_row=True, relu=relu),
    )


def _col_chunks(b: Backend, s: Struct) -> tuple[Any, list[tuple[int, int]]]:
    """The gemm variant's im2col buffer, and the (first image, images) of each chunk it holds at once."""
    N, C, H, W, K, R, S, P, Q, *_ = s.values
    size = col_images(N, C * R * S * P * Q)
    return b.empty((C * R * S * size * P * Q,)), [(n0, min(size, N - n0)) for n0 in range(0, N, size)]


def _im2col(b: Backend, x: Any, col: Any, s: Struct, n0: int, images: int) -> None:
    N, C, H, W, K, R, S, P, Q, *_ = s.values
    b.launch(SOURCE, "im2col", (blocks(C * R * S * images * P * Q),), (THREADS,), (x[n0 : n0 + images], col, s, images))


def _fwd_gemm(b: Backend, a: Arrays, stride: int, pad: int, tile: Tile = DEFAULT) -> None:
    """Per chunk of images: im2col, then one GEMM whose columns are the chunk's output positions."""
    s = conv_shape(a.x.shape, a.w.shape, stride, pad)
    N, C, H, W, K, R, S, P, Q, *_ = s.values
    col, chunks = _col_chunks(b, s)
    for n0, images in chunks:
        _im2col(b, a.x, col, s, n0, images)
        Gemm(
            "gemm_nn",
            M=K,
            N=images * P * Q,
            K=C * R * S,
            lda=C * R * S,
            ldb=images * P * Q,
            bias_per_row=True,
            per_image=P * Q,
        ).launch(b, a.w, col, a.y[n0 : n0 + images], bias=a.bias, tile=tile)


# data gradient --------------------------------------------------------------------------------


def _bwd_data_global(b: Backend, a: Arrays, stride: int, pad: int, bias: Any = None) -> None:
    """``bias``: added per input channel (the transposed convolution's forward; a convolution's
    own data gradient has none)."""
    s = conv_shape(a.dx.shape, a.w.shape, stride, pad)
    N, C, H, W, *_ = s.values
    b.launch(SOURCE, "conv2d_bwd_data_global", (blocks(N * C * H * W),), (THREADS,), (a.dy, a.w, bias, a.dx, s))


def _bwd_data_constant(b: Backend, a: Arrays, stride: int, pad: int) -> None:
    s = conv_shape(a.dx.shape, a.w.shape, stride, pad)
    N, C, H, W, *_ = s.values
    for k0, kc in _chunks(s):  # the first chunk writes dx, later chunks add to it
        b.to_constant(SOURCE, "c_filters", a.w[k0 : k0 + kc])
        b.launch(
            SOURCE,
            "conv2d_bwd_data_constant",
            (tiles(H * W, THREADS), C, N),
            (THREADS,),
            (a.dy, a.dx, s, k0, kc, int(k0 > 0)),
        )


def bwd_data_implicit(
    b: Backend, a: Arrays, stride: int, pad: int, relu: bool = False, tile: Tile = DEFAULT, bias: Any = None
) -> None:
    """One GEMM over the batch: M = C, N = images x H*W, K = K*R*S; ``bias`` as in _bwd_data_global."""
    s = conv_shape(a.dx.shape, a.w.shape, stride, pad)
    N, C, H, W, K, R, S, *_ = s.values
    gemm.run(
        b,
        SOURCE,
        "conv2d_bwd_data_implicit",
        tile,
        C,
        N * H * W,
        K * R * S,
        lambda partial, chunk: (a.dy, a.w, a.y if relu else None, bias, a.dx, partial, s, chunk),
        Out(a.dx, H * W, bias, bias_per_row=True),
        masked=relu,
    )


def _bwd_data_gemm(b: Backend, a: Arrays, stride: int, pad: int, tile: Tile = DEFAULT) -> None:
    """Per chunk of images: col = W^T dy (one GEMM reading dy as images), then col2im."""
    s = conv_shape(a.dx.shape, a.w.shape, stride, pad)
    N, C, H, W, K, R, S, P, Q, *_ = s.values
    col, chunks = _col_chunks(b, s)
    for n0, images in chunks:
        Gemm("gemm_tn_images", M=C * R * S, N=images * P * Q, K=K, lda=C * R * S, ldb=P * Q).launch(
            b, a.w, a.dy[n0 : n0 + images], col, tile=tile
        )
        b.launch(SOURCE, "col2im", (blocks(images * C * H * W),), (THREADS,), (col, a.dx[n0 : n0 + images], s, images))


# weight gradient ------------------------------------------------------------------------------


def _bias(b: Backend, a: Arrays, s: Struct, mask: Any) -> None:
    N, C, H, W, K, R, S, P, Q, *_ = s.values
    if a.db is not None:
        bias_grad(b, a.dy, mask, a.db, N, K, P * Q)


def _bwd_weight_global(b: Backend, a: Arrays, stride: int, pad: int) -> None:
    s = conv_shape(a.x.shape, a.dw.shape, stride, pad)
    N, C, H, W, K, R, S, *_ = s.values
    b.launch(SOURCE, "conv2d_bwd_weight_global", (blocks(K * C * R * S),), (THREADS,), (a.dy, a.x, a.dw, s))
    _bias(b, a, s, None)


def bwd_weight_implicit(b: Backend, a: Arrays, stride: int, pad: int, relu: bool = False, tile: Tile = DEFAULT) -> None:
    """One GEMM over the batch: M = K, N = C*R*S, K = images x P*Q (split-K fills the GPU)."""
    s = conv_shape(a.x.shape, a.dw.shape, stride, pad)
    N, C, H, W, K, R, S, P, Q, *_ = s.values
    mask = a.y if relu else None
    gemm.run(
        b,
        SOURCE,
        "conv2d_bwd_weight_implicit",
        tile,
        K,
        C * R * S,
        N * P * Q,
        lambda partial, chunk: (a.dy, a.x, mask, a.dw, partial, s, chunk),
        Out(a.dw, C * R * S),
        masked=relu,
    )
    _bias(b, a, s, mask)


def _bwd_weight_gemm(b: Backend, a: Arrays, stride: int, pad: int, tile: Tile = DEFAULT) -> None:
    """Per chunk of images: im2col, then dw (+)= dy col^T (one GEMM reading dy as images; the
    first chunk writes dw, later ones add to it)."""
    s = conv_shape(a.x.shape, a.dw.shape, stride, pad)
    N, C, H, W, K, R, S, P, Q, *_ = s.values
    col, chunks = _col_chunks(b, s)
    for n0, images in chunks:
        _im2col(b, a.x, col, s, n0, images)
        Gemm(
            "gemm_nt_images", M=K, N=C * R * S, K=images * P * Q, lda=P * Q, ldb=images * P * Q, accumulate=n0 > 0
        ).launch(b, a.dy[n0 : n0 + images], col, a.dw, tile=tile)
    _bias(b, a, s, None)


# the selftest, the benchmark, the network ------------------------------------------------------


def check_conv(c: Check, rng: np.random.Generator, case: Case) -> None:
    x, w, stride, pad = case.shapes["x"], case.shapes["w"], case.params["stride"], case.params["pad"]
    xh, wh, bh = f32(rng, x), f32(rng, w, 1 / math.sqrt(math.prod(w[1:]))), f32(rng, (w[0],))
    fused = c.variant == "fused"
    expected = ref.conv_fwd(xh.astype(np.float64), wh, bh, stride, pad)
    expected = ref.relu_fwd(expected) if fused else expected
    a = Arrays(x=c.put(xh), w=c.put(wh), bias=c.put(bh), y=c.out(expected.shape))
    c.run("fwd", a, stride=stride, pad=pad)
    yh = c.compare("fwd", "y", a.y, expected, REDUCTION)
    dyh = f32(rng, expected.shape)
    dy_eff = masked(dyh, yh, fused)
    a.dy, a.dx = c.put(dyh), c.out(x)
    c.run("bwd_data", a, stride=stride, pad=pad)
    c.compare("bwd_data", "dx", a.dx, ref.conv_bwd_data(dy_eff, wh.astype(np.float64), x, stride, pad), REDUCTION)
    a.dw, a.db = c.out(w), c.out(w[:1])
    c.run("bwd_weight", a, stride=stride, pad=pad)
    dw, db = ref.conv_bwd_weight(dy_eff, xh.astype(np.float64), w, stride, pad)
    c.compare("bwd_weight", "dw", a.dw, dw, REDUCTION)
    c.compare("bwd_weight", "db", a.db, db, REDUCTION)


def _arrays(case: Case) -> dict[str, tuple[int, ...]]:
    x, w = case.shapes["x"], case.shapes["w"]
    s = conv_shape(x, w, case.params["stride"], case.params["pad"])
    N, C, H, W, K, R, S, P, Q, *_ = s.values
    y = (N, K, P, Q)
    return {"x": x, "w": w, "bias": (K,), "y": y, "dy": y, "dx": x, "dw": w, "db": (K,)}


def library(case: Case, phase: str):
    """cuDNN through PyTorch, the same phase at the same shapes (2-D or 3-D, from the input's)."""
    import torch
    import torch.nn.functional as F

    x = torch.randn(*case.shapes["x"], device="cuda")
    w = torch.randn(*case.shapes["w"], device="cuda") * 0.01
    stride, pad = case.params["stride"], case.params["pad"]
    dims = x.dim() - 2
    conv = getattr(F, f"conv{dims}d")
    dy = torch.ones_like(conv(x, w, stride=stride, padding=pad))
    return {
        "fwd": lambda: conv(x, w, stride=stride, padding=pad),
        "bwd_data": lambda: getattr(torch.nn.grad, f"conv{dims}d_input")(x.shape, w, dy, stride, pad),
        "bwd_weight": lambda: getattr(torch.nn.grad, f"conv{dims}d_weight")(x, w.shape, dy, stride, pad),
    }[phase]


def torch_forward(h, wb, labels, stride: int, pad: int):
    import torch.nn.functional as F

    return getattr(F, f"conv{h.dim() - 2}d")(h, *wb, stride=stride, padding=pad)


def unsupported(layer) -> str | None:
    """The kernels convolve one group, with one size, stride and padding in every dimension."""
    op = layer.op
    if op.groups != 1:
        return "grouped"
    if len({*op.kernel}) > 1 or len({*op.stride}) > 1 or len({*op.padding}) > 1:
        return "non-square"
    if padded_past(op.kernel, op.padding[0]):
        return "padded past its filter"
    return None


def _params(layer) -> dict[str, Any]:
    return {"stride": layer.op.stride[0], "pad": layer.op.padding[0]}


CONV = OPS.register(
    Op(
        "conv",
        ("fwd", "bwd_data", "bwd_weight"),
        default="shared",
        params=_params,
        arrays=_arrays,
        check=check_conv,
        library=library,
        torch_forward=torch_forward,
        defines=DEFINES,
        unsupported=unsupported,
        dims=2,
        small_cases=(
            Case("conv", "k70-s1-p1", {"x": (2, 3, 9, 9), "w": (70, 3, 3, 3)}, {"stride": 1, "pad": 1}),  # 2 tiles of K
            Case(
                "conv", "big-filters", {"x": (1, 64, 13, 13), "w": (5, 64, 11, 11)}, {"stride": 2, "pad": 0}
            ),  # 3 chunks
            Case("conv", "conv1-like", {"x": (1, 3, 27, 27), "w": (4, 3, 11, 11)}, {"stride": 4, "pad": 0}),
            Case("conv", "k6-s1-p0", {"x": (2, 5, 7, 7), "w": (6, 5, 3, 3)}, {"stride": 1, "pad": 0}),  # bwd pads by 2
            # padded as wide as the filter: the corner windows lie wholly in the padding
            Case("conv", "k2-s2-p2", {"x": (2, 2, 6, 7), "w": (3, 2, 2, 2)}, {"stride": 2, "pad": 2}),
            Case(
                "conv", "k4-5x5-s1-p2", {"x": (1, 3, 8, 9), "w": (4, 3, 5, 5)}, {"stride": 1, "pad": 2}
            ),  # Winograd 6x6
        ),
    )
)
IMPLICIT_KERNELS = (
    "conv2d.cu:conv2d_fwd_implicit",
    "conv2d.cu:conv2d_bwd_data_implicit",
    "conv2d.cu:conv2d_bwd_weight_implicit",
)
CONV.add(
    "global",
    fwd=launch(_fwd_global, "conv2d.cu:conv2d_fwd_global"),
    bwd_data=launch(_bwd_data_global, "conv2d.cu:conv2d_bwd_data_global"),
    bwd_weight=launch(_bwd_weight_global, "conv2d.cu:conv2d_bwd_weight_global", *BIAS_GRAD),
)
CONV.add(
    "constant",
    fwd=launch(_fwd_constant, "conv2d.cu:conv2d_fwd_constant"),
    bwd_data=launch(_bwd_data_constant, "conv2d.cu:conv2d_bwd_data_constant"),
    bwd_weight=launch(
        _bwd_weight_global,
        "conv2d.cu:conv2d_bwd_weight_global",
        *BIAS_GRAD,
        note="writes the filters, so nothing to hold in constant memory: runs global",
    ),
)
CONV.add(
    "shared",
    fwd=tiled(fwd_implicit, IMPLICIT_KERNELS[0]),
    bwd_data=tiled(bwd_data_implicit, IMPLICIT_KERNELS[1]),
    bwd_weight=tiled(bwd_weight_implicit, IMPLICIT_KERNELS[2], *BIAS_GRAD),
)
CONV.add(
    "gemm",
    fwd=tiled(_fwd_gemm, "conv2d.cu:im2col", "gemm.cu:gemm_nn"),
    bwd_data=tiled(_bwd_data_gemm, "gemm.cu:gemm_tn_images", "conv2d.cu:col2im"),
    bwd_weight=tiled(_bwd_weight_gemm, "conv2d.cu:im2col", "gemm.cu:gemm_nt_images", *BIAS_GRAD),
)
CONV.add(
    "fused",
    absorbs="relu",
    fallback="shared",
    fwd=tiled(partial(fwd_implicit, relu=True), IMPLICIT_KERNELS[0], note=FUSED_FWD),
    bwd_data=tiled(partial(bwd_data_implicit, relu=True), IMPLICIT_KERNELS[1], note=FUSED_BWD, masked=True),
    bwd_weight=tiled(
        partial(bwd_weight_implicit, relu=True), IMPLICIT_KERNELS[2], *BIAS_GRAD, note=FUSED_BWD, masked=True
    ),
)
