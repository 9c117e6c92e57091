"""The NumPy reference: forward against plain loops, backward against finite differences (float64)."""

import numpy as np
import pytest
from gradient_check import close, numeric_grad

from tracker import reference as ref

rng = np.random.default_rng(7)


@pytest.mark.parametrize("stride, pad", [(1, 0), (1, 1), (2, 2), (4, 0)])
def test_conv2d(stride, pad):
    x, w, b = rng.normal(size=(2, 3, 11, 11)), rng.normal(size=(4, 3, 3, 3)), rng.normal(size=4)
    y = ref.conv_fwd(x, w, b, stride, pad)
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    loops = np.zeros_like(y)
    for n, k, p, q in np.ndindex(*y.shape):
        loops[n, k, p, q] = (xp[n, :, p * stride : p * stride + 3, q * stride : q * stride + 3] * w[k]).sum() + b[k]
    close(y, loops)
    g = rng.normal(size=y.shape)

    def loss():
        return (ref.conv_fwd(x, w, b, stride, pad) * g).sum()

    close(ref.conv_bwd_data(g, w, x.shape, stride, pad), numeric_grad(loss, x))
    dw, db = ref.conv_bwd_weight(g, x, w.shape, stride, pad)
    close(dw, numeric_grad(loss, w))
    close(db, numeric_grad(loss, b))


@pytest.mark.parametrize("stride, pad", [(1, 1), (2, 0)])
def test_conv3d(stride, pad):
    x, w, b = rng.normal(size=(2, 2, 5, 6, 5)), rng.normal(size=(3, 2, 3, 3, 3)), rng.normal(size=3)
    y = ref.conv_fwd(x, w, b, stride, pad)
    xp = np.pad(x, ((0, 0), (0, 0)) + ((pad, pad),) * 3)
    loops = np.zeros_like(y)
    for n, k, o, p, q in np.ndindex(*y.shape):
        box = xp[n, :, o * stride : o * stride + 3, p * stride : p * stride + 3, q * stride : q * stride + 3]
        loops[n, k, o, p, q] = (box * w[k]).sum() + b[k]
    close(y, loops)
    g = rng.normal(size=y.shape)

    def loss():
        return (ref.conv_fwd(x, w, b, stride, pad) * g).sum()

    close(ref.conv_bwd_data(g, w, x.shape, stride, pad), numeric_grad(loss, x))
    dw, db = ref.conv_bwd_weight(g, x, w.shape, stride, pad)
    close(dw, numeric_grad(loss, w))
    close(db, numeric_grad(loss, b))


@pytest.mark.parametrize("dims, kernel, stride", [(2, 2, 2), (3, 2, 2), (2, 3, 2)])
def test_convtranspose(dims, kernel, stride):
    """y = the convolution's data gradient: each input element scatters its filter-weighted
    copy into the output at stride (overlapping where kernel > stride), plus the bias."""
    x, w, b = rng.normal(size=(2, 3, *[3] * dims)), rng.normal(size=(3, 2, *[kernel] * dims)), rng.normal(size=2)
    y = ref.convtranspose_fwd(x, w, b, stride)
    loops = np.zeros(y.shape) + b.reshape(1, -1, *[1] * dims)
    for n, c, *at in np.ndindex(*x.shape):
        box = tuple(slice(i * stride, i * stride + kernel) for i in at)
        loops[(n, slice(None), *box)] += x[(n, c, *at)] * w[c]
    close(y, loops)
    g = rng.normal(size=y.shape)

    def loss():
        return (ref.convtranspose_fwd(x, w, b, stride) * g).sum()

    close(ref.convtranspose_bwd_data(g, w, stride), numeric_grad(loss, x))
    dw, db = ref.convtranspose_bwd_weight(g, x, w.shape, stride)
    close(dw, numeric_grad(loss, w))
    close(db, numeric_grad(loss, b))


def test_linear():
    x, w, b = rng.normal(size=(3, 2, 2, 2)), rng.normal(size=(5, 8)), rng.normal(size=5)
    y = ref.linear_fwd(x, w, b)
    close(y, np.stack([w @ xi.ravel() + b for xi in x]))
    g = rng.normal(size=y.shape)

    def loss():
        return (ref.linear_fwd(x, w, b) * g).sum()

    close(ref.linear_bwd_data(g, w, x.shape), numeric_grad(loss, x))
    dw, db = ref.linear_bwd_weight(g, x)
    close(dw, numeric_grad(loss, w))
    close(db, numeric_grad(loss, b))


def test_relu():
    x = rng.normal(size=(2, 3, 4, 4))
    x[np.abs(x) < 1e-3] = 0.5  # keep finite differences away from the kink
    g = rng.normal(size=x.shape)
    assert (ref.relu_fwd(x) >= 0).all()
    close(ref.relu_bwd(g, ref.relu_fwd(x)), numeric_grad(lambda: (ref.relu_fwd(x) * g).sum(), x))


@pytest.mark.parametrize("size, stride", [(3, 2), (2, 2), (3, 1)])
def test_maxpool(size, stride):
    x = rng.normal(size=(2, 3, 9, 9))
    y = ref.maxpool_fwd(x, size, stride)
    for n, c, p, q in np.ndindex(*y.shape):
        assert y[n, c, p, q] == x[n, c, p * stride : p * stride + size, q * stride : q * stride + size].max()
    g = rng.normal(size=y.shape)
    grad = ref.maxpool_bwd(g, x, size, stride)
    close(grad, numeric_grad(lambda: (ref.maxpool_fwd(x, size, stride) * g).sum(), x))
    assert np.isclose(grad.sum(), g.sum())  # every output gradient lands once, overlaps accumulate


def test_maxpool3d():
    x = rng.normal(size=(2, 2, 4, 6, 4))
    y = ref.maxpool_fwd(x, 2, 2)
    for n, c, o, p, q in np.ndindex(*y.shape):
        assert y[n, c, o, p, q] == x[n, c, 2 * o : 2 * o + 2, 2 * p : 2 * p + 2, 2 * q : 2 * q + 2].max()
    g = rng.normal(size=y.shape)
    close(ref.maxpool_bwd(g, x, 2, 2), numeric_grad(lambda: (ref.maxpool_fwd(x, 2, 2) * g).sum(), x))


def test_lrn():
    x = rng.normal(size=(2, 7, 3, 3)) * 3
    params = dict(size=5, alpha=0.5, beta=0.75, k=2.0)  # a large alpha makes the window matter
    y = ref.lrn_fwd(x, **params)
    n, c = 1, 3
    window = x[n, 1:6, 1, 1]
    assert np.isclose(y[n, c, 1, 1], x[n, c, 1, 1] / (2.0 + 0.5 / 5 * (window**2).sum()) ** 0.75)
    edge = x[n, 0:3, 1, 1]  # channel 0's window is clipped to channels 0..2
    assert np.isclose(y[n, 0, 1, 1], x[n, 0, 1, 1] / (2.0 + 0.5 / 5 * (edge**2).sum()) ** 0.75)
    g = rng.normal(size=x.shape)
    close(ref.lrn_bwd(g, x, y, **params), numeric_grad(lambda: (ref.lrn_fwd(x, **params) * g).sum(), x))


def test_softmax_cross_entropy():
    x = rng.normal(size=(4, 10))
    labels = np.array([0, 3, 9, 3])
    p = ref.softmax_fwd(x)
    assert np.allclose(p.sum(axis=1), 1) and (p > 0).all()
    assert np.allclose(ref.softmax_fwd(x + 100), p)  # shift-invariant: no overflow
    grad = ref.softmax_xent_bwd(p, labels)
    close(grad, numeric_grad(lambda: ref.cross_entropy(ref.softmax_fwd(x), labels), x))


def test_softmax_cross_entropy_at_every_position():
    """A segmentation net's output (N, C, D, H, W): a softmax over the classes at each voxel, each
    voxel's label its own, the loss their mean (PyTorch's F.cross_entropy of such logits)."""
    x = rng.normal(size=(2, 3, 2, 3, 4))
    labels = rng.integers(0, 3, size=(2, 2, 3, 4))
    p = ref.softmax_fwd(x)
    assert np.allclose(p.sum(axis=1), 1)
    at = (1, slice(None), 1, 2, 3)
    assert np.allclose(p[at], np.exp(x[at]) / np.exp(x[at]).sum())  # one voxel's classes alone
    loss = -np.mean([np.log(p[n, labels[n, d, h, w], d, h, w]) for n, d, h, w in np.ndindex(labels.shape)])
    assert ref.cross_entropy(p, labels) == pytest.approx(loss)
    close(ref.softmax_xent_bwd(p, labels), numeric_grad(lambda: ref.cross_entropy(ref.softmax_fwd(x), labels), x))


def test_sigmoid_binary_cross_entropy():
    x = rng.normal(size=(3, 2, 4, 5)) * 3
    t = (rng.random(size=x.shape) < 0.5).astype(np.float64)
    p = ref.sigmoid_fwd(x)
    close(p, 1 / (1 + np.exp(-x)))
    loops = np.mean([-np.log(pi) if ti else -np.log(1 - pi) for pi, ti in zip(p.ravel(), t.ravel())])
    assert np.isclose(ref.binary_cross_entropy(p, t), loops)
    assert np.isclose(ref.bce_with_logits(x, t).mean(), loops)  # the kernels' loss terms, from the logit
    close(ref.sigmoid_bce_bwd(p, t), numeric_grad(lambda: ref.binary_cross_entropy(ref.sigmoid_fwd(x), t), x))
    # far from zero neither overflows nor takes log 0: each term is |x| where wrong, 0 where right
    far = np.array([[-800.0, 800.0, -800.0, 800.0]])
    assert np.allclose(ref.sigmoid_fwd(far), [[0, 1, 0, 1]])
    assert np.allclose(ref.bce_with_logits(far, np.array([[0.0, 1.0, 1.0, 0.0]])), [[0, 0, 800, 800]])
    assert ref.binary_cross_entropy(ref.sigmoid_fwd(far), np.array([[0.0, 1.0, 0.0, 1.0]])) == 0


@pytest.mark.parametrize("shape, scale", [((2, 3, 4, 5), 2), ((1, 2, 3, 2), 3), ((2, 2, 2, 3, 4), 2)])
def test_upsample(shape, scale):
    x = rng.normal(size=shape)
    y = ref.upsample_fwd(x, scale)
    assert y.shape == (*shape[:2], *(s * scale for s in shape[2:]))
    for index in np.ndindex(*y.shape):
        assert y[index] == x[(*index[:2], *(i // scale for i in index[2:]))]
    g = rng.normal(size=y.shape)
    close(ref.upsample_bwd(g, scale), numeric_grad(lambda: (ref.upsample_fwd(x, scale) * g).sum(), x))


@pytest.mark.parametrize("shape, c2", [((2, 3, 4, 5), 2), ((1, 1, 2, 3, 2), 3)])
def test_concat(shape, c2):
    x, x2 = rng.normal(size=shape), rng.normal(size=(shape[0], c2, *shape[2:]))
    y = ref.concat_fwd(x, x2)
    for index in np.ndindex(*y.shape):
        n, c, *rest = index
        assert y[index] == (x[(n, c, *rest)] if c < shape[1] else x2[(n, c - shape[1], *rest)])
    g = rng.normal(size=y.shape)
    dx, dx2 = ref.concat_bwd(g, shape[1])

    def loss():
        return (ref.concat_fwd(x, x2) * g).sum()

    close(dx, numeric_grad(loss, x))
    close(dx2, numeric_grad(loss, x2))


def test_alexnet_shapes_run_through_the_reference():
    """One image through conv1..pool1 at AlexNet's real sizes, in float32 as the GPU will."""
    x = rng.normal(size=(1, 3, 227, 227)).astype(np.float32)
    w = (rng.normal(size=(96, 3, 11, 11)) * 0.01).astype(np.float32)
    y = ref.maxpool_fwd(ref.lrn_fwd(ref.relu_fwd(ref.conv_fwd(x, w, stride=4))))
    assert y.shape == (1, 96, 27, 27) and y.dtype == np.float32
