"""Sigmoid with binary cross-entropy (kernels/sigmoid.cu), the U-Nets' output layer: a grid-stride
forward, and a backward fused with the mean binary cross-entropy over every element of the batch,
as softmax's is with cross-entropy. ``labels``: float32 targets (0 or 1) of the output's shape;
``loss``: (N,), each image's mean loss, so that their mean is the batch's.

``global`` reduces each image's loss with warp shuffles into partials in global memory and a
second kernel; ``shared`` runs one block per image and reduces in shared memory."""

from __future__ import annotations

import numpy as np

from tracker import reference as ref
from tracker.errors import TrackerError
from tracker.ops.launch import THREADS, Arrays, Backend, blocks, tiles
from tracker.ops.registry import OPS, Case, Op, launch
from tracker.ops.selftest import ELEMENTWISE, REDUCTION, Check, f32

SOURCE = "sigmoid.cu"
TILE = 4 * THREADS  # elements a block of the shared forward stages at a time (4 KiB)
PER_THREAD = 4  # elements each thread of the global backward takes at least, where the batch allows
IMAGE_BLOCKS = 64  # at most this many blocks an image in the global backward: at most 512 partials to add
IMAGE_THREADS = 1024  # the shared backward's block, one an image: as many loads in flight on its SM as it can


def _images(a: Arrays) -> tuple[int, int]:
    """(N, E): images and elements an image; the targets must be the output's float32 twin (a
    softmax's int32 class per image would be read out of bounds)."""
    if a.labels is None or tuple(a.labels.shape) != tuple(a.y.shape) or str(a.labels.dtype) != "float32":
        got = "none" if a.labels is None else f"{a.labels.dtype} {tuple(a.labels.shape)}"
        raise TrackerError(
            f"sigmoid's backward needs float32 targets of its output's shape {tuple(a.y.shape)} "
            f"(Arrays.labels), got {got}"
        )
    N = a.y.shape[0]
    return N, a.y.size // N


def _fwd_global(b: Backend, a: Arrays) -> None:
    b.launch(SOURCE, "sigmoid_fwd_global", (blocks(a.x.size // 4 + 1),), (THREADS,), (a.x, a.y, a.x.size))


def _fwd_shared(b: Backend, a: Arrays) -> None:
    b.launch(
        SOURCE,
        "sigmoid_fwd_shared",
        (blocks(a.x.size, TILE),),
        (THREADS,),
        (a.x, a.y, a.x.size, TILE),
        shared_bytes=4 * TILE,
    )


def _bwd_global(b: Backend, a: Arrays) -> None:
    """dx = (y - labels) / (N E); each warp's loss sum to a partial, then each image's partials added."""
    N, E = _images(a)
    per_image = max(1, min(IMAGE_BLOCKS, tiles(E, PER_THREAD * THREADS)))
    parts = per_image * (THREADS // 32)
    partial = b.empty((N, parts)) if a.loss is not None else None
    b.launch(SOURCE, "sigmoid_bce_bwd_global", (per_image, N), (THREADS,), (a.x, a.y, a.labels, a.dx, partial, N, E))
    if partial is not None:
        b.launch(SOURCE, "sigmoid_bce_loss_global", (tiles(N, THREADS),), (THREADS,), (partial, a.loss, N, parts, E))


def _bwd_shared(b: Backend, a: Arrays) -> None:
    N, E = _images(a)
    b.launch(SOURCE, "sigmoid_bce_bwd_shared", (N,), (IMAGE_THREADS,), (a.x, a.y, a.labels, a.dx, a.loss, N, E))


def targets(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """Binary targets (float32 0 or 1) of the output's shape, as the executor draws them."""
    return (rng.random(size=shape) < 0.5).astype(np.float32)


def _check(c: Check, rng: np.random.Generator, case: Case) -> None:
    x = case.shapes["x"]
    xh, th = f32(rng, x, 3.0), targets(rng, x)
    x64 = xh.astype(np.float64)
    expected = ref.sigmoid_fwd(x64)
    a = Arrays(x=c.put(xh), y=c.out(x))
    c.run("fwd", a)
    c.compare("fwd", "y", a.y, expected, ELEMENTWISE)
    a.dx, a.loss, a.labels = c.out(x), c.out((x[0],)), c.put(th)
    c.run("bwd_data", a)
    c.compare("bwd_data", "dx", a.dx, ref.sigmoid_bce_bwd(expected, th), ELEMENTWISE)
    c.compare("bwd_data", "loss", a.loss, ref.bce_with_logits(x64, th).reshape(x[0], -1).mean(axis=1), REDUCTION)


def _arrays(case: Case) -> dict[str, tuple[int, ...]]:
    x = case.shapes["x"]
    return {"x": x, "y": x, "dx": x, "labels": x, "loss": (x[0],)}


def _torch_forward(h, wb, labels):
    """The loss, as softmax's forward is its cross-entropy: the mean over every element."""
    import torch.nn.functional as F

    return F.binary_cross_entropy_with_logits(h, labels.to(h.dtype))


def _case(name: str, x: tuple) -> Case:
    return Case("sigmoid", name, {"x": x})


SIGMOID = OPS.register(
    Op(
        "sigmoid",
        ("fwd", "bwd_data"),
        default="global",
        params=lambda layer: {},
        arrays=_arrays,
        check=_check,
        torch_forward=_torch_forward,
        small_cases=(
            _case("sig-2d", (2, 1, 25, 85)),  # 4,250 elements: 5 tiles, the float4 tail; 3 blocks an image
            _case("sig-3d", (3, 2, 3, 5, 7)),
        ),  # 630: one short block an image, warps with nothing to add
    )
)
SIGMOID.add(
    "global",
    fwd=launch(_fwd_global, "sigmoid.cu:sigmoid_fwd_global"),
    bwd_data=launch(_bwd_global, "sigmoid.cu:sigmoid_bce_bwd_global", "sigmoid.cu:sigmoid_bce_loss_global"),
)
SIGMOID.add(
    "shared",
    fwd=launch(_fwd_shared, "sigmoid.cu:sigmoid_fwd_shared"),
    bwd_data=launch(_bwd_shared, "sigmoid.cu:sigmoid_bce_bwd_shared"),
)
