"""Every kernel variant against the NumPy reference, on any ``Backend``.

``tracker selftest`` runs these checks on a GPU at AlexNet's layer shapes; the test suite runs
the same checks on the CPU emulation at small shapes. Inputs are fresh random float32; every
output starts as NaN, so an element a kernel never writes fails the check; the error is
||out - ref|| / ||ref|| against the float64 reference, under 1e-5 for element-wise ops and 1e-4
for reductions and convolutions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from tracker import reference as ref
from tracker.gpu import launchers as L
from tracker.nets import Network

ELEMENTWISE, REDUCTION = 1e-5, 1e-4


@dataclass(frozen=True)
class Case:
    """One op at one shape: ``layer`` names where the shape comes from."""

    op: str
    layer: str
    shapes: dict


@dataclass(frozen=True)
class Result:
    op: str
    variant: str
    layer: str
    phase: str
    output: str
    error: float  # relative error; inf when an element was never written
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.error < self.tolerance


def _f32(rng, shape, scale=1.0):
    return (rng.normal(size=shape) * scale).astype(np.float32)


def _error(out: np.ndarray, expected: np.ndarray) -> float:
    if np.isnan(out).any():
        return math.inf
    return float(np.linalg.norm(out.astype(np.float64) - expected) / max(np.linalg.norm(expected), 1e-30))


class _Check:
    """Runs one case on a backend, collecting a Result per output."""

    def __init__(self, backend, case: Case, variant: str):
        self.b, self.case, self.variant = backend, case, variant
        self.results: list[Result] = []

    def put(self, array: np.ndarray):
        return self.b.asarray(array)

    def out(self, shape):
        return self.b.asarray(np.full(shape, np.nan, dtype=np.float32))

    def compare(self, phase: str, name: str, device_out, expected: np.ndarray, tol: float) -> np.ndarray:
        host = self.b.asnumpy(device_out)
        self.results.append(Result(self.case.op, self.variant, self.case.layer, phase, name,
                                   _error(host, expected), tol))
        return host


def run_case(backend, case: Case, variant: str, seed: int = 0) -> list[Result]:
    rng = np.random.default_rng(seed)
    c = _Check(backend, case, variant)
    {"conv": _conv, "linear": _linear, "relu": _relu, "maxpool": _maxpool, "lrn": _lrn,
     "softmax": _softmax}[case.op](c, rng, **case.shapes)
    backend.synchronize()
    return c.results


def _masked(dy: np.ndarray, y: np.ndarray, fused: bool) -> np.ndarray:
    return np.where(y > 0, dy, 0).astype(np.float64) if fused else dy.astype(np.float64)


def _conv(c: _Check, rng, x, w, stride, pad):
    xh, wh, bh = _f32(rng, x), _f32(rng, w, 1 / math.sqrt(math.prod(w[1:]))), _f32(rng, w[0])
    fused = c.variant == "fused"
    expected = ref.conv2d_fwd(xh.astype(np.float64), wh, bh, stride, pad)
    expected = ref.relu_fwd(expected) if fused else expected
    X, W, B, Y = c.put(xh), c.put(wh), c.put(bh), c.out(expected.shape)
    L.conv_fwd(c.b, c.variant, X, W, B, Y, stride, pad)
    yh = c.compare("fwd", "y", Y, expected, REDUCTION)
    dyh = _f32(rng, expected.shape)
    dy_eff = _masked(dyh, yh, fused)
    DY, DX = c.put(dyh), c.out(x)
    L.conv_bwd_data(c.b, c.variant, DY, W, DX, stride, pad, relu_y=Y)
    c.compare("bwd_data", "dx", DX, ref.conv2d_bwd_data(dy_eff, wh.astype(np.float64), x, stride, pad), REDUCTION)
    DW, DB = c.out(w), c.out(w[:1])
    L.conv_bwd_weight(c.b, c.variant, DY, X, DW, DB, stride, pad, relu_y=Y)
    dw, db = ref.conv2d_bwd_weight(dy_eff, xh.astype(np.float64), w, stride, pad)
    c.compare("bwd_weight", "dw", DW, dw, REDUCTION)
    c.compare("bwd_weight", "db", DB, db, REDUCTION)


def _linear(c: _Check, rng, x, w):
    xh, wh, bh = _f32(rng, x), _f32(rng, w, 1 / math.sqrt(w[1])), _f32(rng, w[0])
    fused = c.variant == "fused"
    expected = ref.linear_fwd(xh.astype(np.float64), wh, bh)
    expected = ref.relu_fwd(expected) if fused else expected
    X, W, B, Y = c.put(xh), c.put(wh), c.put(bh), c.out(expected.shape)
    L.linear_fwd(c.b, c.variant, X, W, B, Y)
    yh = c.compare("fwd", "y", Y, expected, REDUCTION)
    dyh = _f32(rng, expected.shape)
    dy_eff = _masked(dyh, yh, fused)
    DY, DX = c.put(dyh), c.out(x)
    L.linear_bwd_data(c.b, c.variant, DY, W, DX, relu_y=Y)
    c.compare("bwd_data", "dx", DX, ref.linear_bwd_data(dy_eff, wh.astype(np.float64), x), REDUCTION)
    DW, DB = c.out(w), c.out(w[:1])
    L.linear_bwd_weight(c.b, c.variant, DY, X, DW, DB, relu_y=Y)
    dw, db = ref.linear_bwd_weight(dy_eff, xh.astype(np.float64))
    c.compare("bwd_weight", "dw", DW, dw, REDUCTION)
    c.compare("bwd_weight", "db", DB, db, REDUCTION)


def _relu(c: _Check, rng, x):
    xh, dyh = _f32(rng, x), _f32(rng, x)
    X, Y = c.put(xh), c.out(x)
    L.relu_fwd(c.b, c.variant, X, Y)
    yh = c.compare("fwd", "y", Y, ref.relu_fwd(xh.astype(np.float64)), ELEMENTWISE)
    DX = c.out(x)
    L.relu_bwd(c.b, c.variant, c.put(dyh), Y, DX)
    c.compare("bwd_data", "dx", DX, ref.relu_bwd(dyh.astype(np.float64), yh), ELEMENTWISE)


def _maxpool(c: _Check, rng, x, size, stride):
    xh = _f32(rng, x)
    expected = ref.maxpool_fwd(xh.astype(np.float64), size, stride)
    X, Y = c.put(xh), c.out(expected.shape)
    L.maxpool_fwd(c.b, c.variant, X, Y, size, stride)
    c.compare("fwd", "y", Y, expected, ELEMENTWISE)
    dyh = _f32(rng, expected.shape)
    DX = c.out(x)
    L.maxpool_bwd(c.b, c.variant, c.put(dyh), X, DX, size, stride)
    c.compare("bwd_data", "dx", DX, ref.maxpool_bwd(dyh.astype(np.float64), xh.astype(np.float64), size, stride),
              ELEMENTWISE)


def _lrn(c: _Check, rng, x, size, alpha, beta, k):
    params = dict(size=size, alpha=alpha, beta=beta, k=k)
    xh, dyh = _f32(rng, x, 2.0), _f32(rng, x)
    X, Y = c.put(xh), c.out(x)
    L.lrn_fwd(c.b, c.variant, X, Y, **params)
    yh = c.compare("fwd", "y", Y, ref.lrn_fwd(xh.astype(np.float64), **params), REDUCTION)
    DX = c.out(x)
    L.lrn_bwd(c.b, c.variant, c.put(dyh), X, Y, DX, **params)
    expected = ref.lrn_bwd(dyh.astype(np.float64), xh.astype(np.float64), yh.astype(np.float64), **params)
    c.compare("bwd_data", "dx", DX, expected, REDUCTION)


def _softmax(c: _Check, rng, x):
    xh = _f32(rng, x, 3.0)
    labels = rng.integers(0, x[1], size=x[0]).astype(np.int32)
    expected = ref.softmax_fwd(xh.astype(np.float64))
    X, P = c.put(xh), c.out(x)
    L.softmax_fwd(c.b, c.variant, X, P)
    c.compare("fwd", "p", P, expected, REDUCTION)
    DX, LOSS = c.out(x), c.out((x[0],))
    L.softmax_xent_bwd(c.b, c.variant, P, c.put(labels), DX, LOSS)
    c.compare("bwd_data", "dx", DX, ref.softmax_xent_bwd(expected, labels), ELEMENTWISE)
    c.compare("bwd_data", "loss", LOSS, -np.log(expected[np.arange(x[0]), labels]), ELEMENTWISE)


# Small shapes that still reach every code path: several tiles, constant-memory chunks, vector
# loops with tails. The CPU emulation runs them; on a GPU they are what compute-sanitizer's
# racecheck can afford (it slows shared-memory kernels a thousandfold).
SMALL_CASES = (
    Case("conv", "k70-s1-p1", dict(x=(2, 3, 9, 9), w=(70, 3, 3, 3), stride=1, pad=1)),  # two GEMM tiles of K
    Case("conv", "big-filters", dict(x=(1, 64, 13, 13), w=(5, 64, 11, 11), stride=2, pad=0)),  # 3 constant chunks
    Case("conv", "conv1-like", dict(x=(1, 3, 27, 27), w=(4, 3, 11, 11), stride=4, pad=0)),
    Case("linear", "fc", dict(x=(3, 70), w=(66, 70))),  # two GEMM tiles of N, five of K
    Case("relu", "odd", dict(x=(2, 3, 5, 7))),  # 210 elements: the float4 loop and its tail
    Case("maxpool", "3s2", dict(x=(2, 3, 13, 13), size=3, stride=2)),
    Case("maxpool", "3s2-tiles", dict(x=(1, 2, 35, 35), size=3, stride=2)),  # several 16 x 16 tiles
    Case("maxpool", "2s2", dict(x=(1, 2, 20, 20), size=2, stride=2)),
    Case("lrn", "strips", dict(x=(2, 7, 5, 8), size=5, alpha=0.5, beta=0.75, k=2.0)),  # 40 positions
    Case("softmax", "1000", dict(x=(3, 1000))),
)


def network_cases(net: Network, batch: int) -> Iterator[Case]:
    """One case per layer with kernels: the layer's own shapes at ``batch``."""
    for layer in net.layers:
        x = (batch, *layer.input_shapes[0])
        op = layer.op
        if layer.kind == "conv":
            w = (op.out_channels, x[1] // op.groups, *op.kernel)
            yield Case("conv", layer.name, dict(x=x, w=w, stride=op.stride[0], pad=op.padding[0]))
        elif layer.kind == "linear":
            flat = (batch, math.prod(layer.input_shapes[0]))
            yield Case("linear", layer.name, dict(x=flat, w=(op.out_features, flat[1])))
        elif layer.kind == "relu":
            yield Case("relu", layer.name, dict(x=x))
        elif layer.kind == "maxpool":
            yield Case("maxpool", layer.name, dict(x=x, size=op.kernel[0], stride=op.stride[0]))
        elif layer.kind == "lrn":
            yield Case("lrn", layer.name, dict(x=x, size=op.size, alpha=op.alpha, beta=op.beta, k=op.k))
        elif layer.kind == "softmax":
            yield Case("softmax", layer.name, dict(x=x))
