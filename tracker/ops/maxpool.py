"""Max pooling (kernels/maxpool.cu): a grid-stride kernel per phase, and a shared-memory variant
that stages a POOL_TILE x POOL_TILE tile of outputs' inputs (forward) or inputs (backward)."""

from __future__ import annotations

import numpy as np

from tracker import reference as ref
from tracker.ops.launch import THREADS, Arrays, Backend, Struct, blocks, tiles
from tracker.ops.registry import OPS, Case, Op, launch
from tracker.ops.selftest import ELEMENTWISE, Check, f32

DEFINES = {"POOL_TILE": 16}  # outputs (forward) or inputs (backward) per block side
POOL_TILE = DEFINES["POOL_TILE"]
SOURCE = "maxpool.cu"


def pool_shape(x_shape: tuple, size: int, stride: int) -> Struct:
    N, C, H, W = x_shape
    P, Q = (H - size) // stride + 1, (W - size) // stride + 1
    names = ("N", "C", "H", "W", "P", "Q", "size", "stride")
    return Struct("PoolShape", tuple((n, "i") for n in names), (N, C, H, W, P, Q, size, stride))


def _fwd_global(b: Backend, a: Arrays, size: int, stride: int) -> None:
    s = pool_shape(a.x.shape, size, stride)
    N, C, H, W, P, Q, *_ = s.values
    b.launch(SOURCE, "maxpool_fwd_global", (blocks(N * C * P * Q),), (THREADS,), (a.x, a.y, s))


def _fwd_shared(b: Backend, a: Arrays, size: int, stride: int) -> None:
    s = pool_shape(a.x.shape, size, stride)
    N, C, H, W, P, Q, *_ = s.values
    span = (POOL_TILE - 1) * stride + size
    b.launch(SOURCE, "maxpool_fwd_shared", (tiles(Q, POOL_TILE), tiles(P, POOL_TILE), N * C),
             (POOL_TILE, POOL_TILE), (a.x, a.y, s), shared_bytes=4 * span * span)


def _bwd_global(b: Backend, a: Arrays, size: int, stride: int) -> None:
    s = pool_shape(a.x.shape, size, stride)
    N, C, H, W, *_ = s.values
    b.launch(SOURCE, "maxpool_bwd_global", (blocks(N * C * H * W),), (THREADS,), (a.dy, a.x, a.dx, s))


def _bwd_shared(b: Backend, a: Arrays, size: int, stride: int) -> None:
    s = pool_shape(a.x.shape, size, stride)
    N, C, H, W, *_ = s.values
    outputs = (POOL_TILE + size - 2) // stride + 1  # outputs meeting a POOL_TILE-wide input tile, at most
    span = (outputs - 1) * stride + size
    b.launch(SOURCE, "maxpool_bwd_shared", (tiles(W, POOL_TILE), tiles(H, POOL_TILE), N * C),
             (POOL_TILE, POOL_TILE), (a.dy, a.x, a.dx, s), shared_bytes=4 * (span * span + outputs * outputs))


def _check(c: Check, rng: np.random.Generator, case: Case) -> None:
    x, size, stride = case.shapes["x"], case.params["size"], case.params["stride"]
    xh = f32(rng, x)
    expected = ref.maxpool_fwd(xh.astype(np.float64), size, stride)
    a = Arrays(x=c.put(xh), y=c.out(expected.shape))
    c.run("fwd", a, size=size, stride=stride)
    c.compare("fwd", "y", a.y, expected, ELEMENTWISE)
    dyh = f32(rng, expected.shape)
    a.dy, a.dx = c.put(dyh), c.out(x)
    c.run("bwd_data", a, size=size, stride=stride)
    c.compare("bwd_data", "dx", a.dx, ref.maxpool_bwd(dyh.astype(np.float64), xh.astype(np.float64), size, stride),
              ELEMENTWISE)


def _arrays(case: Case) -> dict[str, tuple[int, ...]]:
    x = case.shapes["x"]
    N, C, H, W, P, Q, *_ = pool_shape(x, case.params["size"], case.params["stride"]).values
    return {"x": x, "y": (N, C, P, Q), "dy": (N, C, P, Q), "dx": x}


def _torch_forward(h, wb, labels, size: int, stride: int):
    import torch.nn.functional as F

    return F.max_pool2d(h, size, stride)


def _case(name: str, x: tuple, size: int, stride: int) -> Case:
    return Case("maxpool", name, {"x": x}, {"size": size, "stride": stride})


MAXPOOL = OPS.register(Op(
    "maxpool", ("fwd", "bwd_data"), default="global",
    params=lambda layer: {"size": layer.op.kernel[0], "stride": layer.op.stride[0]},
    arrays=_arrays, check=_check, torch_forward=_torch_forward, defines=DEFINES,
    small_cases=(_case("3s2", (2, 3, 13, 13), 3, 2),
                 _case("3s2-tiles", (1, 2, 35, 35), 3, 2),  # several tiles
                 _case("2s2", (1, 2, 20, 20), 2, 2)),
))
MAXPOOL.add("global", fwd=launch(_fwd_global, "maxpool.cu:maxpool_fwd_global"),
            bwd_data=launch(_bwd_global, "maxpool.cu:maxpool_bwd_global"))
MAXPOOL.add("shared", fwd=launch(_fwd_shared, "maxpool.cu:maxpool_fwd_shared"),
            bwd_data=launch(_bwd_shared, "maxpool.cu:maxpool_bwd_shared"))
