"""NumPy forward and backward of every op tracker's kernels implement: the CPU truth.

Layout NCHW (NCDHW in 3-D); any float dtype (tests use float64; GPU checks compare float32 kernels against
float64 here). Conventions match the kernels and cuDNN/PyTorch, so the benchmark compares like
with like:
- conv (2-D and 3-D) is cross-correlation with zero padding; weights (K, C, R, S) or (K, C, T, R,
  S); bias (K,). The transposed convolution is its data gradient run forward.
- linear: y = x W^T + b with W (out, in); a 4-D input is flattened per sample.
- LRN across channels: y = x / (k + alpha/n * sum over the n-window of x^2)^beta, the window
  centred on the channel and clipped at the edges (cuDNN and PyTorch divide alpha by n; paper
  003's eq. 5 prints alpha alone).
- max-pool: no padding; the gradient goes to the first maximum of each window, and overlapping
  windows (AlexNet's 3x3 stride 2) accumulate.
- softmax over classes (axis 1) at each position (a classifier's output has one; a 3-D U-Net's
  one per voxel, each with its label); its backward is fused with the mean cross-entropy loss over
  the batch's positions: (p - onehot(labels)) / (N x positions), as in paper 003's softmax
  backward, and as PyTorch's F.cross_entropy over (N, C, ...) logits and (N, ...) labels.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def _pad(x: np.ndarray, pad: int) -> np.ndarray:
    """``x`` zero-padded by ``pad`` on both sides of every spatial axis."""
    return np.pad(x, ((0, 0), (0, 0)) + ((pad, pad),) * (x.ndim - 2)) if pad else x


def _windows(x: np.ndarray, window: tuple[int, ...], stride: int) -> np.ndarray:
    """(N, C, *outputs, *window) view of every window of x at ``stride``, over its spatial axes."""
    view = sliding_window_view(x, window, axis=tuple(range(2, x.ndim)))
    return view[(slice(None), slice(None)) + (slice(None, None, stride),) * len(window)]


def _letters(dims: int) -> tuple[str, str]:
    """einsum subscripts of ``dims`` output positions and of as many filter taps."""
    return "opq"[-dims:] if dims <= 3 else "", "trs"[-dims:] if dims <= 3 else ""


# convolution (2-D and 3-D) ---------------------------------------------------------------------


def conv_fwd(x, w, b=None, stride=1, pad=0):
    out, taps = _letters(w.ndim - 2)
    y = np.einsum(f"nc{out}{taps},kc{taps}->nk{out}", _windows(_pad(x, pad), w.shape[2:], stride), w, optimize=True)
    return y + b.reshape(1, -1, *[1] * (w.ndim - 2)) if b is not None else y


def conv_bwd_data(dy, w, x_shape, stride=1, pad=0):
    """Gradient of the input: every output gradient scattered back through its window."""
    out, taps = _letters(w.ndim - 2)
    dx = np.zeros((*x_shape[:2], *(n + 2 * pad for n in x_shape[2:])), dtype=dy.dtype)
    contrib = np.einsum(f"nk{out},kc{taps}->nc{out}{taps}", dy, w, optimize=True)
    for tap in np.ndindex(*w.shape[2:]):
        at = tuple(slice(i, i + stride * n, stride) for i, n in zip(tap, dy.shape[2:]))
        dx[(slice(None), slice(None), *at)] += contrib[(Ellipsis, *tap)]
    return dx[(slice(None), slice(None), *(slice(pad, pad + n) for n in x_shape[2:]))]


def conv_bwd_weight(dy, x, w_shape, stride=1, pad=0):
    """(gradient of the weights, gradient of the bias)."""
    out, taps = _letters(len(w_shape) - 2)
    dw = np.einsum(
        f"nk{out},nc{out}{taps}->kc{taps}", dy, _windows(_pad(x, pad), tuple(w_shape[2:]), stride), optimize=True
    )
    return dw, dy.sum(axis=(0, *range(2, dy.ndim)))


# transposed convolution: the convolution's data gradient run forward -----------------------------
# w is (C_in, C_out, *kernel), PyTorch's layout: the filters of the convolution it transposes.


def convtranspose_fwd(x, w, b=None, stride=1):
    out_shape = (x.shape[0], w.shape[1], *((n - 1) * stride + k for n, k in zip(x.shape[2:], w.shape[2:])))
    y = conv_bwd_data(x, w, out_shape, stride)
    return y + b.reshape(1, -1, *[1] * (w.ndim - 2)) if b is not None else y


def convtranspose_bwd_data(dy, w, stride=1):
    return conv_fwd(dy, w, stride=stride)


def convtranspose_bwd_weight(dy, x, w_shape, stride=1):
    """(gradient of the weights, gradient of the bias)."""
    dw, _ = conv_bwd_weight(x, dy, w_shape, stride)
    return dw, dy.sum(axis=(0, *range(2, dy.ndim)))


# linear ---------------------------------------------------------------------------------------


def linear_fwd(x, w, b=None):
    y = x.reshape(x.shape[0], -1) @ w.T
    return y + b if b is not None else y


def linear_bwd_data(dy, w, x_shape):
    return (dy @ w).reshape(x_shape)


def linear_bwd_weight(dy, x):
    return dy.T @ x.reshape(x.shape[0], -1), dy.sum(axis=0)


# relu -----------------------------------------------------------------------------------------


def relu_fwd(x):
    return np.maximum(x, 0)


def relu_bwd(dy, y):
    """Gradient through ReLU, masked by the forward output (y > 0)."""
    return np.where(y > 0, dy, 0)


# max-pool -------------------------------------------------------------------------------------


def maxpool_fwd(x, size=3, stride=2):
    dims = x.ndim - 2
    return _windows(x, (size,) * dims, stride).max(axis=tuple(range(-dims, 0)))


def maxpool_argmax(x, size=3, stride=2):
    """(N, C, *outputs): where in each window its first maximum lies (row-major in the window),
    the element the kernels pick and the backward routes the gradient to."""
    dims = x.ndim - 2
    win = _windows(x, (size,) * dims, stride)
    return win.reshape(*win.shape[: 2 + dims], size**dims).argmax(axis=-1)


def maxpool_indices(x, size=3, stride=2):
    """(N, C, *outputs): each window's first maximum as a flat offset into its image's plane (or
    volume), what the shared variant's forward saves (PyTorch's ``return_indices``)."""
    first = maxpool_argmax(x, size, stride)
    offsets = np.unravel_index(first, (size,) * (x.ndim - 2))
    at = tuple(o * stride + off for o, off in zip(np.indices(first.shape)[2:], offsets))
    return np.ravel_multi_index(at, x.shape[2:])


def maxpool_bwd(dy, x, size=3, stride=2):
    flat = maxpool_indices(x, size, stride).reshape(*dy.shape[:2], -1)
    dx = np.zeros_like(x, dtype=dy.dtype).reshape(*x.shape[:2], -1)
    n, c = np.indices(flat.shape)[:2]
    np.add.at(dx, (n, c, flat), dy.reshape(flat.shape))  # overlapping windows accumulate
    return dx.reshape(x.shape)


# LRN ------------------------------------------------------------------------------------------


def _window_sum(v, size):
    """Sum over the channel window [c - size//2, c + size//2], clipped at the edges."""
    half = size // 2
    padded = np.pad(v, ((0, 0), (half, half), (0, 0), (0, 0)))
    csum = np.concatenate([np.zeros_like(padded[:, :1]), np.cumsum(padded, axis=1)], axis=1)
    return csum[:, size:] - csum[:, :-size]


def lrn_scale(x, size=5, alpha=1e-4, k=2.0):
    return k + alpha / size * _window_sum(x * x, size)


def lrn_fwd(x, size=5, alpha=1e-4, beta=0.75, k=2.0):
    return x * lrn_scale(x, size, alpha, k) ** -beta


def lrn_bwd(dy, x, y, size=5, alpha=1e-4, beta=0.75, k=2.0):
    s = lrn_scale(x, size, alpha, k)
    return dy * s**-beta - 2 * alpha * beta / size * x * _window_sum(dy * y / s, size)


# batch normalization, training mode -----------------------------------------------------------
# x (N, C, *spatial), 2-D or 3-D; each channel's statistics over its M = N * prod(spatial) elements,
# the variance biased (PyTorch's F.batch_norm with training=True); w the scale and b the shift (C,).


def _per_channel(v, ndim):
    return v.reshape(1, -1, *([1] * (ndim - 2)))


def batchnorm_fwd(x, w, b, eps=1e-5):
    """(y, mean, var): y = (x - mean) / sqrt(var + eps) * w + b, per channel, var biased."""
    axes = (0, *range(2, x.ndim))
    mean, var = x.mean(axis=axes), x.var(axis=axes)
    xhat = (x - _per_channel(mean, x.ndim)) / np.sqrt(_per_channel(var, x.ndim) + eps)
    return xhat * _per_channel(w, x.ndim) + _per_channel(b, x.ndim), mean, var


def batchnorm_bwd(dy, x, w, eps=1e-5):
    """(dx, dw, db) of the training-mode forward, whose statistics depend on x:
    dx = w / sqrt(var + eps) / M * (M dy - sum dy - xhat sum dy xhat)."""
    axes = (0, *range(2, x.ndim))
    m = x.size // x.shape[1]
    mean, var = x.mean(axis=axes), x.var(axis=axes)
    invstd = 1 / np.sqrt(var + eps)
    xhat = (x - _per_channel(mean, x.ndim)) * _per_channel(invstd, x.ndim)
    db, dw = dy.sum(axis=axes), (dy * xhat).sum(axis=axes)
    dx = _per_channel(w * invstd / m, x.ndim) * (m * dy - _per_channel(db, x.ndim) - xhat * _per_channel(dw, x.ndim))
    return dx, dw, db


def batchnorm_running(running_mean, running_var, mean, var, m, momentum=0.1):
    """The running statistics after one training-mode forward over m elements a channel: each moves
    by momentum towards the batch's, the variance unbiased (var * m / (m - 1)), as PyTorch's do."""
    return (
        (1 - momentum) * running_mean + momentum * mean,
        (1 - momentum) * running_var + momentum * var * m / (m - 1),
    )


# softmax + cross-entropy ----------------------------------------------------------------------


def softmax_fwd(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def label_probabilities(p, labels):
    """p (N, C, ...) at each position's label (labels: (N, ...) class indices): (N, ...)."""
    return np.take_along_axis(p, np.expand_dims(labels, 1), axis=1)[:, 0]


def cross_entropy(p, labels):
    """Mean negative log-likelihood over the batch's positions."""
    return -np.log(label_probabilities(p, labels)).mean()


def softmax_xent_bwd(p, labels):
    """Gradient of mean cross-entropy with respect to the softmax input."""
    grad = p.copy()
    np.put_along_axis(grad, np.expand_dims(labels, 1), label_probabilities(p, labels)[:, None] - 1, axis=1)
    return grad / labels.size


# sigmoid + binary cross-entropy (the U-Nets' output) -----------------------------------------
# The backward is fused with the mean binary cross-entropy over every element of the batch,
# against targets t of the output's shape: (p - t) / p.size, as softmax's is with cross-entropy.


def sigmoid_fwd(x):
    return np.exp(-np.logaddexp(0.0, -x))  # 1 / (1 + exp(-x)), with no overflow for very negative x


def bce_with_logits(x, t):
    """Each element's binary cross-entropy of sigmoid(x) against t, computed from the logit x
    (never log 0): max(x, 0) - x t + log(1 + exp(-|x|)). The kernels' loss terms."""
    return np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x)))


def binary_cross_entropy(p, t):
    """Mean binary cross-entropy of probabilities p against targets t over every element."""
    ones, zeros = np.where(t > 0, p, 1.0), np.where(t < 1, p, 0.0)  # a term whose weight is 0 takes no log of 0
    return -(t * np.log(ones) + (1 - t) * np.log1p(-zeros)).mean()


def sigmoid_bce_bwd(p, t):
    """Gradient of the mean binary cross-entropy (over all N*E elements) for the sigmoid's input."""
    return (p - t) / p.size


# nearest-neighbour up-sampling ----------------------------------------------------------------
# An integer ``scale`` in every spatial dimension, 2-D (N, C, H, W) or 3-D (N, C, D, H, W).


def upsample_fwd(x, scale):
    for axis in range(2, x.ndim):
        x = np.repeat(x, scale, axis=axis)
    return x


def upsample_bwd(dy, scale):
    """Each input's gradient: the sum of the output gradients of its scale^d block."""
    n, c, *spatial = dy.shape
    blocks = [size for s in spatial for size in (s // scale, scale)]
    return dy.reshape(n, c, *blocks).sum(axis=tuple(range(3, 2 + 2 * len(spatial), 2)))


# channel concatenation ------------------------------------------------------------------------


def concat_fwd(x, x2):
    return np.concatenate([x, x2], axis=1)


def concat_bwd(dy, c1):
    """(gradient of the first input: dy's first c1 channels, gradient of the second: the rest)."""
    return dy[:, :c1].copy(), dy[:, c1:].copy()


# a whole network ------------------------------------------------------------------------------


def network_step(net, params: dict, x: np.ndarray, labels: np.ndarray) -> tuple[float, dict]:
    """Forward and backward of a network made of the ops above, ending in its loss layer (softmax
    with cross-entropy against class ``labels``, or sigmoid with binary cross-entropy against
    target ``labels`` of its output's shape): (loss, {layer: (dw, db)}), db None for a layer
    without a bias. ``params``: {layer:
    (w, b)}. Float64 throughout. A layer may read several inputs (concat) and an activation feed
    several layers (a U-Net's skip): its gradient is the sum over its readers."""
    acts = activations(net, params, x)
    last = net.layers[-1]
    probs = acts[last.name]
    if last.kind == "sigmoid":
        loss, dy = binary_cross_entropy(probs, labels), sigmoid_bce_bwd(probs, labels)
    else:
        loss, dy = cross_entropy(probs, labels), softmax_xent_bwd(probs, labels)
    source = last.inputs[0]
    dys = {source: dy.reshape(acts[source].shape)}  # each activation's gradient, summed over its readers
    grads: dict = {}
    for layer in reversed(net.layers[:-1]):  # every reader of a layer comes after it
        inputs = [acts[name] for name in layer.inputs]
        dxs, grads[layer.name] = _backward(layer, params, inputs, acts[layer.name], dys.pop(layer.name))
        for name, dx in zip(layer.inputs, dxs):
            dys[name] = dys[name] + dx if name in dys else dx
    return loss, {name: g for name, g in grads.items() if g is not None}


def activations(net, params: dict, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every layer's output of the forward pass, by layer name ("input": ``x``), float64."""
    acts = {"input": x.astype(np.float64)}
    for layer in net.layers:
        acts[layer.name] = _forward(layer, params, [acts[name] for name in layer.inputs])
    return acts


def _bias(b):
    """A layer's bias in float64, or None: it has none."""
    return None if b is None else b.astype(np.float64)


def _forward(layer, params, inputs: list):
    op, x = layer.op, inputs[0]
    if layer.kind == "concat":
        return concat_fwd(*inputs)
    if layer.kind == "upsample":
        return upsample_fwd(x, op.scale)
    if layer.kind == "sigmoid":
        return sigmoid_fwd(x)
    if layer.kind == "batchnorm":
        w, b = params[layer.name]
        return batchnorm_fwd(x, w.astype(np.float64), _bias(b))[0]
    if layer.kind == "conv":
        w, b = params[layer.name]
        return conv_fwd(x, w.astype(np.float64), _bias(b), op.stride[0], op.padding[0])
    if layer.kind == "convtranspose":
        w, b = params[layer.name]
        return convtranspose_fwd(x, w.astype(np.float64), _bias(b), op.stride[0])
    if layer.kind == "linear":
        w, b = params[layer.name]
        return linear_fwd(x, w.astype(np.float64), _bias(b))
    if layer.kind == "relu":
        return relu_fwd(x)
    if layer.kind == "maxpool":
        return maxpool_fwd(x, op.kernel[0], op.stride[0])
    if layer.kind == "lrn":
        return lrn_fwd(x, op.size, op.alpha, op.beta, op.k)
    return softmax_fwd(x)


def _backward(layer, params, inputs: list, y, dy):
    """(the gradient of each of the layer's inputs, (dw, db) or None)."""
    op, x = layer.op, inputs[0]
    if layer.kind in ("conv", "convtranspose"):
        w, b = params[layer.name]
        w = w.astype(np.float64)
        if layer.kind == "conv":
            stride, pad = op.stride[0], op.padding[0]
            dx, (dw, db) = conv_bwd_data(dy, w, x.shape, stride, pad), conv_bwd_weight(dy, x, w.shape, stride, pad)
        else:
            dx, (dw, db) = (
                convtranspose_bwd_data(dy, w, op.stride[0]),
                convtranspose_bwd_weight(dy, x, w.shape, op.stride[0]),
            )
        return [dx], (dw, None if b is None else db)
    if layer.kind == "linear":
        w = params[layer.name][0].astype(np.float64)
        return [linear_bwd_data(dy, w, x.shape)], linear_bwd_weight(dy, x)
    if layer.kind == "concat":
        return list(concat_bwd(dy, x.shape[1])), None
    if layer.kind == "batchnorm":
        dx, dw, db = batchnorm_bwd(dy, x, params[layer.name][0].astype(np.float64))
        return [dx], (dw, db)
    if layer.kind == "upsample":
        return [upsample_bwd(dy, op.scale)], None
    if layer.kind == "relu":
        return [relu_bwd(dy, y)], None
    if layer.kind == "maxpool":
        return [maxpool_bwd(dy, x, op.kernel[0], op.stride[0])], None
    return [lrn_bwd(dy, x, y, op.size, op.alpha, op.beta, op.k)], None
