"""How each (op, phase, variant) is launched: grids, blocks, shared memory, argument order,
constant-memory chunks and per-image loops.

Pure Python and backend-neutral: a ``Backend`` launches kernels and allocates arrays. The CuPy
backend runs them on a GPU; the tests drive the same launchers through a CPU emulation of the
kernels, so this logic is checked against the NumPy reference without a GPU.
Arrays are NCHW float32 (labels int32); launchers write into the output arrays they are given.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tracker.errors import unknown
from tracker.gpu.kernels import TABLE

CONSTANT_FLOATS = 16384  # kernels/conv2d.cu: c_filters, 64 KiB
POOL_TILE = 16  # kernels/maxpool.cu
GEMM_TILE = 64  # kernels/common.cuh: TILE_M = TILE_N
THREADS = 256
MAX_BLOCKS = 65535
LRN_STRIPS = {"fwd": 32, "bwd_data": 8}  # positions per block: keeps shared memory under 48 KiB


@dataclass(frozen=True)
class Struct:
    """A kernel's struct argument: C field names and types ('i' int32, 'f' float32), in order."""

    name: str
    fields: tuple[tuple[str, str], ...]
    values: tuple

    def numpy(self) -> np.void:
        dtype = np.dtype([(n, np.int32 if t == "i" else np.float32) for n, t in self.fields], align=True)
        return np.array(self.values, dtype=dtype)[()]


def conv_shape(N, C, H, W, K, R, S, P, Q, stride, pad) -> Struct:
    names = ("N", "C", "H", "W", "K", "R", "S", "P", "Q", "stride", "pad")
    return Struct("ConvShape", tuple((n, "i") for n in names), (N, C, H, W, K, R, S, P, Q, stride, pad))


def pool_shape(N, C, H, W, P, Q, size, stride) -> Struct:
    names = ("N", "C", "H", "W", "P", "Q", "size", "stride")
    return Struct("PoolShape", tuple((n, "i") for n in names), (N, C, H, W, P, Q, size, stride))


def lrn_shape(N, C, HW, size, alpha, beta, k) -> Struct:
    fields = (("N", "i"), ("C", "i"), ("HW", "i"), ("size", "i"), ("alpha", "f"), ("beta", "f"), ("k", "f"))
    return Struct("LrnShape", fields, (N, C, HW, size, alpha, beta, k))


@dataclass
class LaunchRecord:
    """One kernel launch as a backend logs it; ``time_ms`` is filled in after a synchronize."""

    source: str
    kernel: str
    grid: tuple
    block: tuple
    shared_bytes: int
    registers: int | None
    context: Any = None  # what the caller was doing (the executor: its Step)
    start: Any = None
    end: Any = None
    time_ms: float | None = None


class Backend(Protocol):
    """Launches kernels (logging a LaunchRecord, tagged with ``context``, to ``log``), allocates."""

    log: list[LaunchRecord]
    context: Any

    def launch(self, source: str, kernel: str, grid: tuple, block: tuple, args: tuple,
               shared_bytes: int = 0) -> None: ...

    def empty(self, shape: tuple) -> Any: ...

    def to_constant(self, source: str, symbol: str, array: Any) -> None: ...


def _blocks(n: int, per_block: int = THREADS) -> int:
    return max(1, min(-(-n // per_block), MAX_BLOCKS))


def _tiles(n: int, tile: int) -> int:
    return -(-n // tile)


KERNELS = {(v.op, v.phase, v.variant): v.kernels for v in TABLE}


def launches(op: str, phase: str):
    """Marks a launcher of ``op``'s ``phase``: a variant the kernel table does not know never
    reaches a launch (it would otherwise fall into some branch's kernel)."""
    def wrap(launcher):
        @functools.wraps(launcher)
        def checked(b, variant: str, *args, **kwargs):
            if (op, phase, variant) not in KERNELS:
                raise unknown(f"{op} {phase} variant", variant,
                              [v for (o, p, v) in KERNELS if (o, p) == (op, phase)])
            return launcher(b, variant, *args, **kwargs)
        return checked
    return wrap


# conv2d ---------------------------------------------------------------------------------------

def conv_geometry(x_shape, w_shape, stride: int, pad: int) -> Struct:
    N, C, H, W = x_shape
    K, _, R, S = w_shape
    P, Q = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - S) // stride + 1
    return conv_shape(N, C, H, W, K, R, S, P, Q, stride, pad)


def _filter_chunks(s: Struct) -> int:
    _, C, _, _, K, R, S, *_ = s.values
    per_channel = C * R * S
    if per_channel > CONSTANT_FLOATS:
        raise ValueError(f"one output channel's filters ({per_channel} floats) exceed 64 KiB of constant memory")
    return min(K, CONSTANT_FLOATS // per_channel)


@launches("conv", "fwd")
def conv_fwd(b: Backend, variant: str, x, w, bias, y, stride: int, pad: int) -> None:
    s = conv_geometry(x.shape, w.shape, stride, pad)
    N, C, H, W, K, R, S, P, Q, *_ = s.values
    if variant == "global":
        b.launch("conv2d.cu", "conv2d_fwd_global", (_blocks(N * K * P * Q),), (THREADS,), (x, w, bias, y, s))
    elif variant == "constant":
        chunk = _filter_chunks(s)
        for k0 in range(0, K, chunk):
            kc = min(chunk, K - k0)
            b.to_constant("conv2d.cu", "c_filters", w[k0:k0 + kc])
            b.launch("conv2d.cu", "conv2d_fwd_constant", (_tiles(P * Q, THREADS), kc, N), (THREADS,),
                     (x, bias, y, s, k0))
    elif variant in ("shared", "fused"):
        b.launch("conv2d.cu", "conv2d_fwd_implicit", (_tiles(P * Q, GEMM_TILE), _tiles(K, GEMM_TILE), N),
                 (THREADS,), (x, w, bias, y, s, int(variant == "fused")))
    elif variant == "gemm":
        col = b.empty((C * R * S, P * Q))
        for n in range(N):
            b.launch("conv2d.cu", "im2col", (_blocks(C * R * S * P * Q),), (THREADS,), (x[n], col, s))
            _gemm(b, "gemm_nn", w, None, col, y[n], K, P * Q, C * R * S, C * R * S, P * Q, bias, 1, 0, 0)
    else:
        raise ValueError(f"conv has no variant {variant!r}")


@launches("conv", "bwd_data")
def conv_bwd_data(b: Backend, variant: str, dy, w, dx, stride: int, pad: int, relu_y=None) -> None:
    s = conv_geometry(dx.shape, w.shape, stride, pad)
    N, C, H, W, K, R, S, P, Q, *_ = s.values
    if variant == "global":
        b.launch("conv2d.cu", "conv2d_bwd_data_global", (_blocks(N * C * H * W),), (THREADS,), (dy, w, dx, s))
    elif variant == "constant":
        chunk = _filter_chunks(s)
        for k0 in range(0, K, chunk):
            kc = min(chunk, K - k0)
            b.to_constant("conv2d.cu", "c_filters", w[k0:k0 + kc])
            b.launch("conv2d.cu", "conv2d_bwd_data_constant", (_tiles(H * W, THREADS), C, N), (THREADS,),
                     (dy, dx, s, k0, kc, int(k0 > 0)))
    elif variant in ("shared", "fused"):
        b.launch("conv2d.cu", "conv2d_bwd_data_implicit", (_tiles(H * W, GEMM_TILE), _tiles(C, GEMM_TILE), N),
                 (THREADS,), (dy, w, relu_y if variant == "fused" else None, dx, s))
    elif variant == "gemm":
        col = b.empty((C * R * S, P * Q))
        for n in range(N):
            _gemm(b, "gemm_tn", w, None, dy[n], col, C * R * S, P * Q, K, C * R * S, P * Q, None, 0, 0, 0)
            b.launch("conv2d.cu", "col2im", (_blocks(C * H * W),), (THREADS,), (col, dx[n], s))
    else:
        raise ValueError(f"conv has no variant {variant!r}")


@launches("conv", "bwd_weight")
def conv_bwd_weight(b: Backend, variant: str, dy, x, dw, db, stride: int, pad: int, relu_y=None) -> None:
    s = conv_geometry(x.shape, dw.shape, stride, pad)
    N, C, H, W, K, R, S, P, Q, *_ = s.values
    mask = relu_y if variant == "fused" else None
    if variant in ("global", "constant"):
        b.launch("conv2d.cu", "conv2d_bwd_weight_global", (_blocks(K * C * R * S),), (THREADS,), (dy, x, dw, s))
    elif variant in ("shared", "fused"):
        b.launch("conv2d.cu", "conv2d_bwd_weight_implicit", (_tiles(C * R * S, GEMM_TILE), _tiles(K, GEMM_TILE), 1),
                 (THREADS,), (dy, x, mask, dw, s))
    elif variant == "gemm":
        col = b.empty((C * R * S, P * Q))
        for n in range(N):
            b.launch("conv2d.cu", "im2col", (_blocks(C * R * S * P * Q),), (THREADS,), (x[n], col, s))
            _gemm(b, "gemm_nt", dy[n], None, col, dw, K, C * R * S, P * Q, P * Q, P * Q, None, 0, 0, int(n > 0))
    else:
        raise ValueError(f"conv has no variant {variant!r}")
    if db is not None:
        bias_grad(b, dy, mask, db, N, K, P * Q)


# dense GEMM, bias gradient, linear ------------------------------------------------------------

def _gemm(b: Backend, kernel, a, a_mask, bmat, c, M, N, K, lda, ldb, bias, bias_per_row, relu, accumulate) -> None:
    b.launch("gemm.cu", kernel, (_tiles(N, GEMM_TILE), _tiles(M, GEMM_TILE)), (THREADS,),
             (a, a_mask, bmat, c, M, N, K, lda, ldb, bias, bias_per_row, relu, accumulate))


def bias_grad(b: Backend, dy, relu_y, db, N: int, K: int, L: int) -> None:
    b.launch("gemm.cu", "bias_grad", (K,), (THREADS,), (dy, relu_y, db, N, K, L))


@launches("linear", "fwd")
def linear_fwd(b: Backend, variant: str, x, w, bias, y) -> None:
    N, n_in = x.shape[0], w.shape[1]
    n_out = w.shape[0]
    if variant == "global":
        b.launch("linear.cu", "linear_fwd_global", (_blocks(N * n_out),), (THREADS,), (x, w, bias, y, N, n_in, n_out))
    else:  # shared, fused: y = x w^T (+ bias) (ReLU)
        _gemm(b, "gemm_nt", x, None, w, y, N, n_out, n_in, n_in, n_in, bias, 0, int(variant == "fused"), 0)


@launches("linear", "bwd_data")
def linear_bwd_data(b: Backend, variant: str, dy, w, dx, relu_y=None) -> None:
    N, n_out, n_in = dy.shape[0], w.shape[0], w.shape[1]
    mask = relu_y if variant == "fused" else None
    if variant == "global":
        b.launch("linear.cu", "linear_bwd_data_global", (_blocks(N * n_in),), (THREADS,), (dy, w, dx, N, n_in, n_out))
    else:  # dx = dy w
        _gemm(b, "gemm_nn", dy, mask, w, dx, N, n_in, n_out, n_out, n_in, None, 0, 0, 0)


@launches("linear", "bwd_weight")
def linear_bwd_weight(b: Backend, variant: str, dy, x, dw, db, relu_y=None) -> None:
    N, n_out, n_in = dy.shape[0], dw.shape[0], dw.shape[1]
    mask = relu_y if variant == "fused" else None
    if variant == "global":
        b.launch("linear.cu", "linear_bwd_weight_global", (_blocks(n_out * n_in),), (THREADS,),
                 (dy, x, dw, N, n_in, n_out))
    else:  # dw = dy^T x
        _gemm(b, "gemm_tn", dy, mask, x, dw, n_out, n_in, N, n_out, n_in, None, 0, 0, 0)
    if db is not None:
        bias_grad(b, dy, mask, db, N, n_out, 1)


# element-wise and pooling ---------------------------------------------------------------------

@launches("relu", "fwd")
def relu_fwd(b: Backend, variant: str, x, y) -> None:
    b.launch("relu.cu", "relu_fwd_global", (_blocks(x.size // 4 + 1),), (THREADS,), (x, y, x.size))


@launches("relu", "bwd_data")
def relu_bwd(b: Backend, variant: str, dy, y, dx) -> None:
    b.launch("relu.cu", "relu_bwd_global", (_blocks(dy.size // 4 + 1),), (THREADS,), (dy, y, dx, dy.size))


def pool_geometry(x_shape, size: int, stride: int) -> Struct:
    N, C, H, W = x_shape
    return pool_shape(N, C, H, W, (H - size) // stride + 1, (W - size) // stride + 1, size, stride)


@launches("maxpool", "fwd")
def maxpool_fwd(b: Backend, variant: str, x, y, size: int, stride: int) -> None:
    s = pool_geometry(x.shape, size, stride)
    N, C, H, W, P, Q, *_ = s.values
    if variant == "global":
        b.launch("maxpool.cu", "maxpool_fwd_global", (_blocks(N * C * P * Q),), (THREADS,), (x, y, s))
    else:
        span = (POOL_TILE - 1) * stride + size
        b.launch("maxpool.cu", "maxpool_fwd_shared", (_tiles(Q, POOL_TILE), _tiles(P, POOL_TILE), N * C),
                 (POOL_TILE, POOL_TILE), (x, y, s), shared_bytes=4 * span * span)


@launches("maxpool", "bwd_data")
def maxpool_bwd(b: Backend, variant: str, dy, x, dx, size: int, stride: int) -> None:
    s = pool_geometry(x.shape, size, stride)
    N, C, H, W, *_ = s.values
    if variant == "global":
        b.launch("maxpool.cu", "maxpool_bwd_global", (_blocks(N * C * H * W),), (THREADS,), (dy, x, dx, s))
    else:
        outputs = (POOL_TILE + size - 2) // stride + 1  # outputs meeting a 16-wide input tile, at most
        span = (outputs - 1) * stride + size
        b.launch("maxpool.cu", "maxpool_bwd_shared", (_tiles(W, POOL_TILE), _tiles(H, POOL_TILE), N * C),
                 (POOL_TILE, POOL_TILE), (dy, x, dx, s), shared_bytes=4 * (span * span + outputs * outputs))


@launches("lrn", "fwd")
def lrn_fwd(b: Backend, variant: str, x, y, size=5, alpha=1e-4, beta=0.75, k=2.0) -> None:
    N, C, H, W = x.shape
    s = lrn_shape(N, C, H * W, size, alpha, beta, k)
    if variant == "global":
        b.launch("lrn.cu", "lrn_fwd_global", (_blocks(x.size),), (THREADS,), (x, y, s))
    else:
        strip = LRN_STRIPS["fwd"]
        b.launch("lrn.cu", "lrn_fwd_shared", (_tiles(H * W, strip), N), (strip, THREADS // strip), (x, y, s),
                 shared_bytes=4 * C * strip)


@launches("lrn", "bwd_data")
def lrn_bwd(b: Backend, variant: str, dy, x, y, dx, size=5, alpha=1e-4, beta=0.75, k=2.0) -> None:
    N, C, H, W = x.shape
    s = lrn_shape(N, C, H * W, size, alpha, beta, k)
    if variant == "global":
        b.launch("lrn.cu", "lrn_bwd_global", (_blocks(x.size),), (THREADS,), (dy, x, y, dx, s))
    else:
        strip = LRN_STRIPS["bwd_data"]
        b.launch("lrn.cu", "lrn_bwd_shared", (_tiles(H * W, strip), N), (strip, THREADS // strip),
                 (dy, x, y, dx, s), shared_bytes=4 * 4 * C * strip)


@launches("softmax", "fwd")
def softmax_fwd(b: Backend, variant: str, x, y) -> None:
    N, C = x.shape
    if variant == "global":
        b.launch("softmax.cu", "softmax_fwd_global", (_tiles(N, THREADS),), (THREADS,), (x, y, N, C))
    else:
        b.launch("softmax.cu", "softmax_fwd_shared", (N,), (THREADS,), (x, y, N, C))


@launches("softmax", "bwd_data")
def softmax_xent_bwd(b: Backend, variant: str, p, labels, dx, loss=None) -> None:
    N, C = p.shape
    if variant == "global":
        b.launch("softmax.cu", "softmax_xent_bwd_global", (_blocks(N * C),), (THREADS,), (p, labels, dx, loss, N, C))
    else:
        b.launch("softmax.cu", "softmax_xent_bwd_shared", (N,), (THREADS,), (p, labels, dx, loss, N, C))
