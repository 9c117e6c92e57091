"""Every kernel variant, launched by tracker/gpu/launchers.py, against the NumPy reference, on a
CPU emulation of CUDA (tests/emu): the index arithmetic, the launch geometry, constant-memory
chunks, per-image loops, the ReLU masks of the fused variants and that every output element is
written (outputs start as NaN). A GPU must still confirm all of it: `tracker selftest`."""

import numpy as np
import pytest

from tracker import reference as ref
from tracker.gpu import launchers as L
from tracker.gpu.kernels import VARIANTS

emu = pytest.importorskip("emu.emulator")
pytestmark = pytest.mark.skipif(not emu.available(), reason="needs g++ for the CUDA emulation")

rng = np.random.default_rng(3)
ELEMENTWISE, REDUCTION = 1e-5, 1e-4


@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    return emu.Emulator(tmp_path_factory.mktemp("emu"))


def f32(*shape, scale=1.0):
    return (rng.normal(size=shape) * scale).astype(np.float32)


def poisoned(shape):
    return np.full(shape, np.nan, dtype=np.float32)


def check(out, expected, tol):
    assert not np.isnan(out).any(), "an output element was never written"
    err = np.linalg.norm(out.astype(np.float64) - expected) / max(np.linalg.norm(expected), 1e-30)
    assert err < tol, err


CONV_CASES = {  # x shape, w shape, stride, pad
    "k70-s1-p1": ((2, 3, 9, 9), (70, 3, 3, 3), 1, 1),  # two 64-wide GEMM tiles of output channels
    "big-filters-s2": ((1, 64, 13, 13), (5, 64, 11, 11), 2, 0),  # 3 constant-memory chunks
    "alexnet-conv1-like": ((1, 3, 27, 27), (4, 3, 11, 11), 4, 0),
}


@pytest.mark.parametrize("variant", VARIANTS["conv"])
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv(gpu, variant, case):
    x_shape, w_shape, stride, pad = CONV_CASES[case]
    x, w, b = f32(*x_shape), f32(*w_shape, scale=0.1), f32(w_shape[0])
    fused = variant == "fused"
    expected = ref.conv2d_fwd(x.astype(np.float64), w, b, stride, pad)
    if fused:
        expected = ref.relu_fwd(expected)
    y = poisoned(expected.shape)
    L.conv_fwd(gpu, variant, x, w, b, y, stride, pad)
    check(y, expected, REDUCTION)

    dy = f32(*y.shape)
    dy_eff = np.where(y > 0, dy, 0).astype(np.float64) if fused else dy.astype(np.float64)
    dx = poisoned(x.shape)
    L.conv_bwd_data(gpu, variant, dy, w, dx, stride, pad, relu_y=y)
    check(dx, ref.conv2d_bwd_data(dy_eff, w.astype(np.float64), x.shape, stride, pad), REDUCTION)

    dw, db = poisoned(w.shape), poisoned(b.shape)
    L.conv_bwd_weight(gpu, variant, dy, x, dw, db, stride, pad, relu_y=y)
    exp_dw, exp_db = ref.conv2d_bwd_weight(dy_eff, x.astype(np.float64), w.shape, stride, pad)
    check(dw, exp_dw, REDUCTION)
    check(db, exp_db, REDUCTION)


@pytest.mark.parametrize("variant", VARIANTS["linear"])
def test_linear(gpu, variant):
    x, w, b = f32(3, 70), f32(66, 70, scale=0.1), f32(66)
    fused = variant == "fused"
    expected = ref.linear_fwd(x.astype(np.float64), w, b)
    expected = ref.relu_fwd(expected) if fused else expected
    y = poisoned(expected.shape)
    L.linear_fwd(gpu, variant, x, w, b, y)
    check(y, expected, REDUCTION)
    dy = f32(*y.shape)
    dy_eff = np.where(y > 0, dy, 0).astype(np.float64) if fused else dy.astype(np.float64)
    dx = poisoned(x.shape)
    L.linear_bwd_data(gpu, variant, dy, w, dx, relu_y=y)
    check(dx, ref.linear_bwd_data(dy_eff, w.astype(np.float64), x.shape), REDUCTION)
    dw, db = poisoned(w.shape), poisoned(b.shape)
    L.linear_bwd_weight(gpu, variant, dy, x, dw, db, relu_y=y)
    exp_dw, exp_db = ref.linear_bwd_weight(dy_eff, x.astype(np.float64))
    check(dw, exp_dw, REDUCTION)
    check(db, exp_db, REDUCTION)


def test_relu(gpu):
    x, dy = f32(2, 3, 5, 7), f32(2, 3, 5, 7)  # 210 elements: the float4 loop and its tail
    y = poisoned(x.shape)
    L.relu_fwd(gpu, "global", x, y)
    check(y, ref.relu_fwd(x.astype(np.float64)), ELEMENTWISE)
    dx = poisoned(x.shape)
    L.relu_bwd(gpu, "global", dy, y, dx)
    check(dx, ref.relu_bwd(dy.astype(np.float64), y), ELEMENTWISE)


@pytest.mark.parametrize("variant", VARIANTS["maxpool"])
@pytest.mark.parametrize("shape, size, stride", [((2, 3, 13, 13), 3, 2), ((1, 2, 35, 35), 3, 2),
                                                 ((1, 2, 20, 20), 2, 2)])
def test_maxpool(gpu, variant, shape, size, stride):
    x = f32(*shape)
    expected = ref.maxpool_fwd(x.astype(np.float64), size, stride)
    y = poisoned(expected.shape)
    L.maxpool_fwd(gpu, variant, x, y, size, stride)
    check(y, expected, ELEMENTWISE)
    dy, dx = f32(*y.shape), poisoned(x.shape)
    L.maxpool_bwd(gpu, variant, dy, x, dx, size, stride)
    check(dx, ref.maxpool_bwd(dy.astype(np.float64), x.astype(np.float64), size, stride), ELEMENTWISE)


@pytest.mark.parametrize("variant", VARIANTS["lrn"])
def test_lrn(gpu, variant):
    params = dict(size=5, alpha=0.5, beta=0.75, k=2.0)  # a large alpha makes the window matter
    x = f32(2, 7, 5, 8, scale=2.0)  # 40 positions: more than one strip
    expected = ref.lrn_fwd(x.astype(np.float64), **params)
    y = poisoned(x.shape)
    L.lrn_fwd(gpu, variant, x, y, **params)
    check(y, expected, REDUCTION)
    dy, dx = f32(*x.shape), poisoned(x.shape)
    L.lrn_bwd(gpu, variant, dy, x, y, dx, **params)
    check(dx, ref.lrn_bwd(dy.astype(np.float64), x.astype(np.float64), y.astype(np.float64), **params), REDUCTION)


@pytest.mark.parametrize("variant", VARIANTS["softmax"])
def test_softmax_cross_entropy(gpu, variant):
    x = f32(3, 1000, scale=3.0)
    labels = np.array([0, 999, 417], dtype=np.int32)
    expected = ref.softmax_fwd(x.astype(np.float64))
    p = poisoned(x.shape)
    L.softmax_fwd(gpu, variant, x, p)
    check(p, expected, REDUCTION)
    dx, loss = poisoned(x.shape), poisoned((3,))
    L.softmax_xent_bwd(gpu, variant, p, labels, dx, loss)
    check(dx, ref.softmax_xent_bwd(expected, labels), ELEMENTWISE)
    check(loss, -np.log(expected[np.arange(3), labels]), ELEMENTWISE)
