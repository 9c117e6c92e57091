"""Softmax with cross-entropy (kernels/softmax.cu): one thread per row, or one block per row with
block reductions; the backward is fused with the cross-entropy loss."""

from __future__ import annotations

import numpy as np

from tracker import reference as ref
from tracker.ops.launch import THREADS, Arrays, Backend, blocks, tiles
from tracker.ops.registry import OPS, Case, Op, launch
from tracker.ops.selftest import ELEMENTWISE, REDUCTION, Check, f32

SOURCE = "softmax.cu"


def _rows(a: Arrays):
    N = a.y.shape[0]
    return a.y.reshape(N, -1).shape


def _fwd_global(b: Backend, a: Arrays) -> None:
    N, C = _rows(a)
    b.launch(SOURCE, "softmax_fwd_global", (tiles(N, THREADS),), (THREADS,), (a.x.reshape(N, C), a.y, N, C))


def _fwd_shared(b: Backend, a: Arrays) -> None:
    N, C = _rows(a)
    b.launch(SOURCE, "softmax_fwd_shared", (N,), (THREADS,), (a.x.reshape(N, C), a.y, N, C))


def _bwd_global(b: Backend, a: Arrays) -> None:
    """dx = (p - onehot(labels)) / N, and each row's loss."""
    N, C = _rows(a)
    b.launch(SOURCE, "softmax_xent_bwd_global", (blocks(N * C),), (THREADS,),
             (a.y, a.labels, a.dx.reshape(N, C), a.loss, N, C))


def _bwd_shared(b: Backend, a: Arrays) -> None:
    N, C = _rows(a)
    b.launch(SOURCE, "softmax_xent_bwd_shared", (N,), (THREADS,), (a.y, a.labels, a.dx.reshape(N, C), a.loss, N, C))


def _check(c: Check, rng: np.random.Generator, case: Case) -> None:
    x = case.shapes["x"]
    xh = f32(rng, x, 3.0)
    labels = rng.integers(0, x[1], size=x[0]).astype(np.int32)
    expected = ref.softmax_fwd(xh.astype(np.float64))
    a = Arrays(x=c.put(xh), y=c.out(x))
    c.run("fwd", a)
    c.compare("fwd", "p", a.y, expected, REDUCTION)
    a.dx, a.loss, a.labels = c.out(x), c.out((x[0],)), c.put(labels)
    c.run("bwd_data", a)
    c.compare("bwd_data", "dx", a.dx, ref.softmax_xent_bwd(expected, labels), ELEMENTWISE)
    c.compare("bwd_data", "loss", a.loss, -np.log(expected[np.arange(x[0]), labels]), ELEMENTWISE)


def _arrays(case: Case) -> dict[str, tuple[int, ...]]:
    x = case.shapes["x"]
    return {"x": x, "y": x, "dx": x, "labels": (x[0],), "loss": (x[0],)}


def _torch_forward(h, wb, labels):
    import torch.nn.functional as F

    return F.cross_entropy(h, labels)


SOFTMAX = OPS.register(Op(
    "softmax", ("fwd", "bwd_data"), default="shared", params=lambda layer: {}, arrays=_arrays, check=_check,
    torch_forward=_torch_forward,
    small_cases=(Case("softmax", "1000", {"x": (3, 1000)}),),
))
SOFTMAX.add("global", fwd=launch(_fwd_global, "softmax.cu:softmax_fwd_global"),
            bwd_data=launch(_bwd_global, "softmax.cu:softmax_xent_bwd_global"))
SOFTMAX.add("shared", fwd=launch(_fwd_shared, "softmax.cu:softmax_fwd_shared"),
            bwd_data=launch(_bwd_shared, "softmax.cu:softmax_xent_bwd_shared"))
