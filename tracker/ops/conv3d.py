"""conv3d (kernels/conv3d.cu): the 3-D convolutions of the 3-D U-Net, as direct global-memory
kernels and as implicit GEMM through shared memory on the tuned GEMM core (``tracker tune``
searches its tiles as it does conv2d's). The selftest's check and the PyTorch hooks are conv2d's:
the reference and PyTorch's calls take the dimension from the input."""

from __future__ import annotations

from typing import Any

from tracker.ops import gemm
from tracker.ops.conv2d import check_conv, check_taps, library, torch_forward, unsupported
from tracker.ops.gemm import BIAS_GRAD, DEFAULT, Out, Tile, bias_grad, tiled
from tracker.ops.launch import THREADS, Arrays, Backend, Struct, blocks
from tracker.ops.registry import OPS, Case, Op, launch

SOURCE = "conv3d.cu"


def conv3_shape(x_shape: tuple, w_shape: tuple, stride: int, pad: int) -> Struct:
    """The kernels' Conv3Shape of input ``x_shape`` (N, C, D, H, W) and filters ``w_shape`` (K, C, T, R, S)."""
    N, C, D, H, W = x_shape
    K, _, T, R, S = w_shape
    check_taps((T, R, S), pad)
    O, P, Q = ((n + 2 * pad - k) // stride + 1 for n, k in ((D, T), (H, R), (W, S)))
    names = ("N", "C", "D", "H", "W", "K", "T", "R", "S", "O", "P", "Q", "stride", "pad")
    return Struct("Conv3Shape", tuple((n, "i") for n in names), (N, C, D, H, W, K, T, R, S, O, P, Q, stride, pad))


# direct (global) ------------------------------------------------------------------------------


def _fwd_global(b: Backend, a: Arrays, stride: int, pad: int) -> None:
    s = conv3_shape(a.x.shape, a.w.shape, stride, pad)
    b.launch(SOURCE, "conv3d_fwd_global", (blocks(a.y.size),), (THREADS,), (a.x, a.w, a.bias, a.y, s))


def _bwd_data_global(b: Backend, a: Arrays, stride: int, pad: int, bias: Any = None) -> None:
    """``bias``: added per input channel (the transposed convolution's forward)."""
    s = conv3_shape(a.dx.shape, a.w.shape, stride, pad)
    b.launch(SOURCE, "conv3d_bwd_data_global", (blocks(a.dx.size),), (THREADS,), (a.dy, a.w, bias, a.dx, s))


def _bias(b: Backend, a: Arrays, s: Struct) -> None:
    N, C, D, H, W, K, T, R, S, O, P, Q, *_ = s.values
    if a.db is not None:
        bias_grad(b, a.dy, None, a.db, N, K, O * P * Q)


def _bwd_weight_global(b: Backend, a: Arrays, stride: int, pad: int) -> None:
    s = conv3_shape(a.x.shape, a.dw.shape, stride, pad)
    b.launch(SOURCE, "conv3d_bwd_weight_global", (blocks(a.dw.size),), (THREADS,), (a.dy, a.x, a.dw, s))
    _bias(b, a, s)


# implicit GEMM (shared) -----------------------------------------------------------------------


def _fwd_implicit(b: Backend, a: Arrays, stride: int, pad: int, tile: Tile = DEFAULT) -> None:
    """One GEMM over the batch: M = K, N = images x O*P*Q, K = C*T*R*S."""
    s = conv3_shape(a.x.shape, a.w.shape, stride, pad)
    N, C, D, H, W, K, T, R, S, O, P, Q, *_ = s.values
    gemm.run(
        b,
        SOURCE,
        "conv3d_fwd_implicit",
        tile,
        K,
        N * O * P * Q,
        C * T * R * S,
        lambda partial, chunk: (a.x, a.w, a.bias, a.y, partial, s, chunk),
        Out(a.y, O * P * Q, a.bias, bias_per_row=True),
    )


def _bwd_data_implicit(b: Backend, a: Arrays, stride: int, pad: int, tile: Tile = DEFAULT, bias: Any = None) -> None:
    """One GEMM over the batch: M = C, N = images x D*H*W, K = K*T*R*S; ``bias`` as in _bwd_data_global."""
    s = conv3_shape(a.dx.shape, a.w.shape, stride, pad)
    N, C, D, H, W, K, T, R, S, *_ = s.values
    gemm.run(
        b,
        SOURCE,
        "conv3d_bwd_data_implicit",
        tile,
        C,
        N * D * H * W,
        K * T * R * S,
        lambda partial, chunk: (a.dy, a.w, bias, a.dx, partial, s, chunk),
        Out(a.dx, D * H * W, bias, bias_per_row=True),
    )


def _bwd_weight_implicit(b: Backend, a: Arrays, stride: int, pad: int, tile: Tile = DEFAULT) -> None:
    """One GEMM over the batch: M = K, N = C*T*R*S, K = images x O*P*Q (split-K fills the GPU)."""
    s = conv3_shape(a.x.shape, a.dw.shape, stride, pad)
    N, C, D, H, W, K, T, R, S, O, P, Q, *_ = s.values
    gemm.run(
        b,
        SOURCE,
        "conv3d_bwd_weight_implicit",
        tile,
        K,
        C * T * R * S,
        N * O * P * Q,
        lambda partial, chunk: (a.dy, a.x, a.dw, partial, s, chunk),
        Out(a.dw, C * T * R * S),
    )
    _bias(b, a, s)


# the selftest, the benchmark, the network ------------------------------------------------------


def _arrays(case: Case) -> dict[str, tuple[int, ...]]:
    x, w = case.shapes["x"], case.shapes["w"]
    N, C, D, H, W, K, T, R, S, O, P, Q, *_ = conv3_shape(x, w, case.params["stride"], case.params["pad"]).values
    y = (N, K, O, P, Q)
    return {"x": x, "w": w, "bias": (K,), "y": y, "dy": y, "dx": x, "dw": w, "db": (K,)}


CONV3D = OPS.register(
    Op(
        "conv3d",
        ("fwd", "bwd_data", "bwd_weight"),
        default="shared",
        layer_kind="conv",
        dims=3,
        params=lambda layer: {"stride": layer.op.stride[0], "pad": layer.op.padding[0]},
        arrays=_arrays,
        check=check_conv,
        library=library,
        torch_forward=torch_forward,
        unsupported=unsupported,
        small_cases=(
            Case(
                "conv3d", "3x3x3-p1", {"x": (2, 3, 5, 6, 7), "w": (4, 3, 3, 3, 3)}, {"stride": 1, "pad": 1}
            ),  # the U-Net's
            Case(
                "conv3d", "k70-1x1x1", {"x": (1, 5, 3, 4, 4), "w": (70, 5, 1, 1, 1)}, {"stride": 1, "pad": 0}
            ),  # 2 tiles of K
            Case(
                "conv3d", "s2-p0", {"x": (2, 2, 7, 5, 6), "w": (3, 2, 3, 2, 2)}, {"stride": 2, "pad": 0}
            ),  # taps differ
            Case(
                "conv3d", "1x1x1-p1", {"x": (1, 2, 3, 4, 5), "w": (2, 2, 1, 1, 1)}, {"stride": 1, "pad": 1}
            ),  # every border output's window wholly in the padding
        ),
    )
)
CONV3D.add(
    "global",
    fwd=launch(_fwd_global, "conv3d.cu:conv3d_fwd_global"),
    bwd_data=launch(_bwd_data_global, "conv3d.cu:conv3d_bwd_data_global"),
    bwd_weight=launch(_bwd_weight_global, "conv3d.cu:conv3d_bwd_weight_global", *BIAS_GRAD),
)
CONV3D.add(
    "shared",
    fwd=tiled(_fwd_implicit, "conv3d.cu:conv3d_fwd_implicit"),
    bwd_data=tiled(_bwd_data_implicit, "conv3d.cu:conv3d_bwd_data_implicit"),
    bwd_weight=tiled(_bwd_weight_implicit, "conv3d.cu:conv3d_bwd_weight_implicit", *BIAS_GRAD),
)
