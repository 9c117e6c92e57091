"""Softmax with cross-entropy (kernels/softmax.cu), over the classes at each position: a
classifier's output (N x C) has one position, a 3-D U-Net's (N x C x D x H x W) one per voxel, each
with its label. ``global``: one thread per position's row; ``shared``: one block per row with
block reductions, for a classifier's long rows (elsewhere it runs global's kernels). The backward
is fused with the mean cross-entropy loss over the batch's positions."""

from __future__ import annotations

import math

import numpy as np

from tracker import reference as ref
from tracker.ops.launch import THREADS, Arrays, Backend, blocks, tiles
from tracker.ops.registry import OPS, Case, Op, launch
from tracker.ops.selftest import ELEMENTWISE, REDUCTION, Check, f32

SOURCE = "softmax.cu"


def _shape(a: Arrays) -> tuple[int, int, int]:
    """(images N, classes C, positions S)."""
    N, C = a.y.shape[:2]
    return N, C, _positions_per_image(a.y.shape)


def _positions_per_image(shape: tuple[int, ...]) -> int:
    """S: 1 for a classifier's N x C, D H W for a 3-D U-Net's output."""
    return math.prod(shape[2:])


def _fwd_global(b: Backend, a: Arrays) -> None:
    N, C, S = _shape(a)
    b.launch(SOURCE, "softmax_fwd_global", (tiles(N * S, THREADS),), (THREADS,), (a.x, a.y, N * S, C, S))


def _fwd_shared(b: Backend, a: Arrays) -> None:
    N, C, S = _shape(a)
    if S > 1:  # a block per row of a few classes would idle: the rows are global's, a thread each
        return _fwd_global(b, a)
    b.launch(SOURCE, "softmax_fwd_shared", (N,), (THREADS,), (a.x, a.y, N, C))


def _bwd_global(b: Backend, a: Arrays) -> None:
    """dx = (p - onehot(labels)) / (N S), and each position's loss."""
    N, C, S = _shape(a)
    b.launch(
        SOURCE, "softmax_xent_bwd_global", (blocks(N * C * S),), (THREADS,), (a.y, a.labels, a.dx, a.loss, N, C, S)
    )


def _bwd_shared(b: Backend, a: Arrays) -> None:
    N, C, S = _shape(a)
    if S > 1:
        return _bwd_global(b, a)
    b.launch(SOURCE, "softmax_xent_bwd_shared", (N,), (THREADS,), (a.y, a.labels, a.dx, a.loss, N, C))


def _classifier(case: Case, phase: str) -> bool:
    """Where ``shared``'s own kernels run: one position per image."""
    return _positions_per_image(case.shapes["x"]) == 1


def _check(c: Check, rng: np.random.Generator, case: Case) -> None:
    x = case.shapes["x"]
    xh = f32(rng, x, 3.0)
    labels = rng.integers(0, x[1], size=label_shape(x)).astype(np.int32)
    expected = ref.softmax_fwd(xh.astype(np.float64))
    a = Arrays(x=c.put(xh), y=c.out(x))
    c.run("fwd", a)
    c.compare("fwd", "p", a.y, expected, REDUCTION)
    a.dx, a.loss, a.labels = c.out(x), c.out(label_shape(x)), c.put(labels)
    c.run("bwd_data", a)
    c.compare("bwd_data", "dx", a.dx, ref.softmax_xent_bwd(expected, labels), ELEMENTWISE)
    c.compare("bwd_data", "loss", a.loss, -np.log(ref.label_probabilities(expected, labels)), ELEMENTWISE)


def label_shape(x: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of the labels and of the losses of a softmax over ``x``: one per image and position."""
    return (x[0], *x[2:])


def _arrays(case: Case) -> dict[str, tuple[int, ...]]:
    x = case.shapes["x"]
    return {"x": x, "y": x, "dx": x, "labels": label_shape(x), "loss": label_shape(x)}


def _torch_forward(h, wb, labels):
    import torch.nn.functional as F

    return F.cross_entropy(h, labels)


SOFTMAX = OPS.register(
    Op(
        "softmax",
        ("fwd", "bwd_data"),
        default="shared",
        params=lambda layer: {},
        arrays=_arrays,
        check=_check,
        torch_forward=_torch_forward,
        small_cases=(
            Case("softmax", "1000", {"x": (3, 1000)}),
            Case("softmax", "per-voxel", {"x": (2, 3, 3, 4, 5)}),
        ),  # a 3-D U-Net's output, small
    )
)
SOFTMAX.add(
    "global",
    fwd=launch(_fwd_global, "softmax.cu:softmax_fwd_global"),
    bwd_data=launch(_bwd_global, "softmax.cu:softmax_xent_bwd_global"),
)
_ROWS = "a block per image's row of classes; with more than one position per image, global's kernels"
SOFTMAX.add(
    "shared",
    applies=_classifier,
    fwd=launch(_fwd_shared, "softmax.cu:softmax_fwd_shared", "softmax.cu:softmax_fwd_global", note=_ROWS),
    bwd_data=launch(
        _bwd_shared, "softmax.cu:softmax_xent_bwd_shared", "softmax.cu:softmax_xent_bwd_global", note=_ROWS
    ),
)
