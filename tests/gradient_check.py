"""Finite differences and the tolerance the NumPy reference's gradients are held to (float64)."""

from __future__ import annotations

import numpy as np


def numeric_grad(f, x, eps=1e-6):
    """Central differences of the scalar f at every element of x."""
    grad = np.zeros_like(x)
    flat, g = x.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        keep = flat[i]
        flat[i] = keep + eps
        up = f()
        flat[i] = keep - eps
        down = f()
        flat[i] = keep
        g[i] = (up - down) / (2 * eps)
    return grad


def close(a, b):
    assert np.abs(a - b).max() <= 1e-6 * max(1.0, np.abs(b).max()), np.abs(a - b).max()
