"""Max pooling (kernels/maxpool.cu): a grid-stride kernel per phase that saves nothing (the
backward finds every covering window's maximum again), and a shared-memory variant with one block
per band of full-width rows of a plane, whose forward saves each window's maximum as an offset
(``Arrays.argmax``, int32, the output's shape) and whose backward compares offsets against those
instead of reading x. ``maxpool3d`` is the same in 3-D (the 3-D U-Net's 2x2x2 pools): a band of
rows of one depth slice, with the depth slices its windows read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tracker import reference as ref
from tracker.errors import TrackerError
from tracker.ops.launch import DEFAULT_SHARED, THREADS, Arrays, Backend, Struct, blocks, tiles
from tracker.ops.registry import OPS, Case, Op, launch
from tracker.ops.selftest import ELEMENTWISE, EXACT, Check, f32

SOURCE = "maxpool.cu"
BAND_BYTES = 24 * 1024  # shared memory a band may take: 8 blocks of 256 threads share an SM
WAVE = 1024  # blocks that fill a large GPU several times over; fewer planes are cut into more bands


def band_rows(rows: int, planes: int, bytes_for: Callable[[int], int]) -> int:
    """Rows per band of the shared variant: a plane's ``rows`` cut into as few even bands as fit
    BAND_BYTES each (``bytes_for(n)``: the shared memory n rows take), more where the planes
    alone would not make WAVE blocks."""
    fit = max((n for n in range(1, rows + 1) if bytes_for(n) <= BAND_BYTES), default=1)
    if bytes_for(fit) > DEFAULT_SHARED:
        raise TrackerError(
            f"a band of this pooling layer needs {bytes_for(fit)} bytes of shared memory, over "
            f"{DEFAULT_SHARED}; use the global variant"
        )
    return tiles(rows, min(rows, max(tiles(rows, fit), tiles(WAVE, planes))))


def _block(items: int) -> int:
    """Threads of a band's block: one per item up to THREADS, whole warps."""
    return min(THREADS, 32 * tiles(items, 32))


def _argmax(a: Arrays) -> Any:
    """The saved offsets a shared launcher writes or reads: a clear error where none was handed."""
    if a.argmax is None:
        raise TrackerError("the shared max-pool needs the array argmax (int32, the output's shape)")
    return a.argmax


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

    def input_bytes(rows: int) -> int:  # the input rows `rows` output rows read
        return 4 * ((rows - 1) * stride + size) * W

    band = band_rows(P, N * C, input_bytes)
    b.launch(
        SOURCE,
        "maxpool_fwd_shared",
        (tiles(P, band), N * C),
        (_block(band * Q),),
        (a.x, a.y, _argmax(a), s, band),
        shared_bytes=input_bytes(band),
    )


def _bwd_global(b: Backend, a: Arrays, size: int, stride: int) -> None:
    s = pool_shape(a.x.shape, size, stride)
    N, C, H, W, *_ = s.values
    b.launch(SOURCE, "maxpool_bwd_global", (blocks(N * C * H * W),), (THREADS,), (a.dy, a.x, a.dx, s))


def bwd_band_bytes(rows: int, size: int, stride: int, P: int, Q: int) -> int:
    """Shared memory of a backward band of ``rows`` input rows: at most ``outputs`` rows of windows
    meet it; per window its gradient and its maximum's saved offset."""
    outputs = min((rows + size - 2) // stride + 1, P)
    return 4 * 2 * outputs * Q


def _bwd_shared(b: Backend, a: Arrays, size: int, stride: int) -> None:
    s = pool_shape(a.dx.shape, size, stride)
    N, C, H, W, P, Q, *_ = s.values
    band = band_rows(H, N * C, lambda rows: bwd_band_bytes(rows, size, stride, P, Q))
    b.launch(
        SOURCE,
        "maxpool_bwd_shared",
        (tiles(H, band), N * C),
        (_block(band * W),),
        (a.dy, _argmax(a), a.dx, s, band),
        shared_bytes=bwd_band_bytes(band, size, stride, P, Q),
    )


def pool3_shape(x_shape: tuple, size: int, stride: int) -> Struct:
    N, C, D, H, W = x_shape
    O, P, Q = ((n - size) // stride + 1 for n in (D, H, W))
    names = ("N", "C", "D", "H", "W", "O", "P", "Q", "size", "stride")
    return Struct("Pool3Shape", tuple((n, "i") for n in names), (N, C, D, H, W, O, P, Q, size, stride))


def _fwd3_global(b: Backend, a: Arrays, size: int, stride: int) -> None:
    s = pool3_shape(a.x.shape, size, stride)
    b.launch(SOURCE, "maxpool3d_fwd_global", (blocks(a.y.size),), (THREADS,), (a.x, a.y, s))


def _bwd3_global(b: Backend, a: Arrays, size: int, stride: int) -> None:
    s = pool3_shape(a.x.shape, size, stride)
    b.launch(SOURCE, "maxpool3d_bwd_global", (blocks(a.dx.size),), (THREADS,), (a.dy, a.x, a.dx, s))


def _fwd3_shared(b: Backend, a: Arrays, size: int, stride: int) -> None:
    s = pool3_shape(a.x.shape, size, stride)
    N, C, D, H, W, O, P, Q, *_ = s.values

    def input_bytes(rows: int) -> int:  # the input rows `rows` output rows read, in each of `size` slices
        return 4 * size * ((rows - 1) * stride + size) * W

    band = band_rows(P, N * C * O, input_bytes)
    b.launch(
        SOURCE,
        "maxpool3d_fwd_shared",
        (tiles(P, band) * O, N * C),
        (_block(band * Q),),
        (a.x, a.y, _argmax(a), s, band),
        shared_bytes=input_bytes(band),
    )


def bwd3_band_bytes(rows: int, size: int, stride: int, O: int, P: int, Q: int) -> int:
    """Shared memory of a 3-D backward band of ``rows`` input rows of one depth slice: for each
    output depth slice that meets it (at most ``slices``), a 2-D band's gradients and offsets."""
    slices = min((size - 1) // stride + 1, O)
    return slices * bwd_band_bytes(rows, size, stride, P, Q)


def _bwd3_shared(b: Backend, a: Arrays, size: int, stride: int) -> None:
    s = pool3_shape(a.dx.shape, size, stride)
    N, C, D, H, W, O, P, Q, *_ = s.values
    band = band_rows(H, N * C * D, lambda rows: bwd3_band_bytes(rows, size, stride, O, P, Q))
    b.launch(
        SOURCE,
        "maxpool3d_bwd_shared",
        (tiles(H, band) * D, N * C),
        (_block(band * W),),
        (a.dy, _argmax(a), a.dx, s, band),
        shared_bytes=bwd3_band_bytes(band, size, stride, O, P, Q),
    )


def _check(c: Check, rng: np.random.Generator, case: Case) -> None:
    """Forward and backward against the reference; the saved offsets too, where the variant saves
    them (PyTorch's phases, a Check of no variant of ours, keep theirs inside F.max_pool)."""
    size, stride = case.params["size"], case.params["stride"]
    xh = f32(rng, case.shapes["x"])
    x64 = xh.astype(np.float64)
    expected = ref.maxpool_fwd(x64, size, stride)
    a = Arrays(x=c.put(xh), y=c.out(expected.shape), argmax=c.out_offsets(expected.shape))
    c.run("fwd", a, size=size, stride=stride)
    c.compare("fwd", "y", a.y, expected, ELEMENTWISE)
    variants = OPS[case.op].variants
    if c.variant in variants and variants[c.variant].saves_argmax:
        c.compare("fwd", "argmax", a.argmax, ref.maxpool_indices(x64, size, stride), EXACT)
    dyh = f32(rng, expected.shape)
    a.dy, a.dx = c.put(dyh), c.out(xh.shape)
    c.run("bwd_data", a, size=size, stride=stride)
    c.compare("bwd_data", "dx", a.dx, ref.maxpool_bwd(dyh.astype(np.float64), x64, size, stride), ELEMENTWISE)


def _arrays(case: Case) -> dict[str, tuple[int, ...]]:
    x, size, stride = case.shapes["x"], case.params["size"], case.params["stride"]
    y = (*x[:2], *((n - size) // stride + 1 for n in x[2:]))
    return {"x": x, "y": y, "dy": y, "dx": x, "argmax": y}


def _torch_forward(h, wb, labels, size: int, stride: int):
    import torch.nn.functional as F

    return (F.max_pool2d if h.dim() == 4 else F.max_pool3d)(h, size, stride)


def _case(name: str, x: tuple, size: int, stride: int) -> Case:
    return Case("maxpool" if len(x) == 4 else "maxpool3d", name, {"x": x}, {"size": size, "stride": stride})


def _params(layer) -> dict[str, int]:
    return {"size": layer.op.kernel[0], "stride": layer.op.stride[0]}


def _unsupported(layer) -> str | None:
    return "non-square" if len({*layer.op.kernel}) > 1 or len({*layer.op.stride}) > 1 else None


# The default is `shared`: on the H100 at batch 128 (three benchmark runs, benchmarks/RESULTS.md)
# its bands run each backward 1.35-3.7x faster than `global` (pool1: 0.22-0.29 against 0.83-0.87
# ms), each forward within 14 us of it: AlexNet's three pools take 0.66-0.84 ms an iteration, not 1.69-1.78.
# That backward still found each window's maximum (H200: pool1 0.297 ms, issue-bound, against a
# 0.082 ms copy); reading the offsets its forward saves instead has not run on a GPU yet.
MAXPOOL = OPS.register(
    Op(
        "maxpool",
        ("fwd", "bwd_data"),
        default="shared",
        params=_params,
        arrays=_arrays,
        check=_check,
        torch_forward=_torch_forward,
        unsupported=_unsupported,
        dims=2,
        small_cases=(
            _case("3s2", (2, 3, 13, 13), 3, 2),
            _case("3s2-edge", (1, 2, 14, 14), 3, 2),  # the last row meets no window
            _case("2s2", (1, 2, 20, 20), 2, 2),
            _case("2s3-bands", (1, 512, 9, 9), 2, 3),
        ),  # a run-time window with gaps; bands of 2 and 5 rows
    )
)
MAXPOOL.add(
    "global",
    fwd=launch(_fwd_global, "maxpool.cu:maxpool_fwd_global"),
    bwd_data=launch(_bwd_global, "maxpool.cu:maxpool_bwd_global"),
)
MAXPOOL.add(
    "shared",
    saves_argmax=True,
    fwd=launch(_fwd_shared, "maxpool.cu:maxpool_fwd_shared"),
    bwd_data=launch(_bwd_shared, "maxpool.cu:maxpool_bwd_shared"),
)

MAXPOOL3D = OPS.register(
    Op(
        "maxpool3d",
        ("fwd", "bwd_data"),
        default="shared",
        layer_kind="maxpool",
        dims=3,
        params=_params,
        arrays=_arrays,
        check=_check,
        torch_forward=_torch_forward,
        unsupported=_unsupported,
        small_cases=(
            _case("3d-2s2", (2, 3, 4, 6, 8), 2, 2),  # the U-Net's
            _case("3d-3s2-edge", (1, 2, 6, 7, 7), 3, 2),  # overlapping in depth too; the last slice meets none
            _case("3d-2s2-bands", (1, 2, 4, 64, 60), 2, 2),
        ),  # rows cut into bands
    )
)
MAXPOOL3D.add(
    "global",
    fwd=launch(_fwd3_global, "maxpool.cu:maxpool3d_fwd_global"),
    bwd_data=launch(_bwd3_global, "maxpool.cu:maxpool3d_bwd_global"),
)
MAXPOOL3D.add(
    "shared",
    saves_argmax=True,
    fwd=launch(_fwd3_shared, "maxpool.cu:maxpool3d_fwd_shared"),
    bwd_data=launch(_bwd3_shared, "maxpool.cu:maxpool3d_bwd_shared"),
)
