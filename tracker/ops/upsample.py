"""Nearest-neighbour up-sampling by an integer scale (kernels/upsample.cu), 2-D (N, C, H, W) or
3-D (N, C, D, H, W): a grid-stride kernel per phase (the forward in float4s where output rows
are whole float4s), and a shared-memory variant with one block per band of input rows of a
plane, full width, whose inputs (fwd) or output gradients (bwd) are staged with cp.async."""

from __future__ import annotations

import numpy as np

from tracker import reference as ref
from tracker.errors import TrackerError
from tracker.ops.launch import DEFAULT_SHARED, THREADS, Arrays, Backend, Struct, blocks, tiles
from tracker.ops.registry import OPS, Case, Op, launch
from tracker.ops.selftest import ELEMENTWISE, REDUCTION, Check, f32

SOURCE = "upsample.cu"
BAND_BYTES = 24 * 1024  # shared memory a band may take: 8 blocks of 256 threads share an SM (as max-pool's)
WAVE = 1024  # blocks that fill a large GPU several times over; fewer planes are cut into more bands


def up_shape(x_shape: tuple, scale: int) -> Struct:
    """The input seen as planes of H x W, each feeding ``depth`` output planes (scale for 3-D)."""
    if len(x_shape) not in (4, 5):
        raise TrackerError(f"upsample takes 2-D (N, C, H, W) or 3-D (N, C, D, H, W) inputs, not {x_shape}")
    *planes, H, W = x_shape
    depth = scale if len(x_shape) == 5 else 1
    names = ("slabs", "H", "W", "depth", "scale")
    return Struct("UpShape", tuple((n, "i") for n in names), (int(np.prod(planes)), H, W, depth, scale))


def band_rows(H: int, slabs: int, row_bytes: int) -> int:
    """Input rows a band of the shared variant takes: as few even bands of a plane as fit
    BAND_BYTES each (``row_bytes``: the shared memory one input row's band takes), more where the
    planes alone would not make WAVE blocks."""
    if row_bytes > DEFAULT_SHARED:
        raise TrackerError(
            f"one row of this upsample layer needs {row_bytes} bytes of shared memory, over "
            f"{DEFAULT_SHARED}; use the global variant"
        )
    fit = max(1, min(H, BAND_BYTES // row_bytes))
    return tiles(H, min(H, max(tiles(H, fit), tiles(WAVE, slabs))))


def _block(items: int) -> int:
    """Threads of a band's block: one per item up to THREADS, whole warps."""
    return min(THREADS, 32 * tiles(items, 32))


def _fwd_global(b: Backend, a: Arrays, scale: int) -> None:
    s = up_shape(a.x.shape, scale)
    vector = 4 if a.x.shape[-1] * scale % 4 == 0 else 1
    b.launch(SOURCE, "upsample_fwd_global", (blocks(a.y.size // vector),), (THREADS,), (a.x, a.y, s))


def _fwd_shared(b: Backend, a: Arrays, scale: int) -> None:
    s = up_shape(a.x.shape, scale)
    slabs, H, W, depth, _ = s.values
    band = band_rows(H, slabs, 4 * W)
    b.launch(
        SOURCE,
        "upsample_fwd_shared",
        (tiles(H, band) * slabs,),
        (_block(depth * band * scale * scale * W),),
        (a.x, a.y, s, band),
        shared_bytes=4 * band * W,
    )


def _bwd_global(b: Backend, a: Arrays, scale: int) -> None:
    s = up_shape(a.dx.shape, scale)
    b.launch(SOURCE, "upsample_bwd_global", (blocks(a.dx.size),), (THREADS,), (a.dy, a.dx, s))


def _bwd_shared(b: Backend, a: Arrays, scale: int) -> None:
    s = up_shape(a.dx.shape, scale)
    slabs, H, W, depth, _ = s.values
    row_bytes = 4 * depth * scale * scale * W  # one input row's output gradients
    band = band_rows(H, slabs, row_bytes)
    b.launch(
        SOURCE,
        "upsample_bwd_shared",
        (tiles(H, band) * slabs,),
        (_block(band * W),),
        (a.dy, a.dx, s, band),
        shared_bytes=band * row_bytes,
    )


def _check(c: Check, rng: np.random.Generator, case: Case) -> None:
    x, scale = case.shapes["x"], case.params["scale"]
    xh = f32(rng, x)
    expected = ref.upsample_fwd(xh.astype(np.float64), scale)
    a = Arrays(x=c.put(xh), y=c.out(expected.shape))
    c.run("fwd", a, scale=scale)
    c.compare("fwd", "y", a.y, expected, ELEMENTWISE)
    dyh = f32(rng, expected.shape)
    a.dy, a.dx = c.put(dyh), c.out(x)
    c.run("bwd_data", a, scale=scale)
    c.compare("bwd_data", "dx", a.dx, ref.upsample_bwd(dyh.astype(np.float64), scale), REDUCTION)


def _arrays(case: Case) -> dict[str, tuple[int, ...]]:
    x, scale = case.shapes["x"], case.params["scale"]
    y = (*x[:2], *(d * scale for d in x[2:]))
    return {"x": x, "y": y, "dy": y, "dx": x}


def _torch_forward(h, wb, labels, scale: int):
    import torch.nn.functional as F

    return F.interpolate(h, scale_factor=scale, mode="nearest")


def _case(name: str, x: tuple, scale: int) -> Case:
    return Case("upsample", name, {"x": x}, {"scale": scale})


UPSAMPLE = OPS.register(
    Op(
        "upsample",
        ("fwd", "bwd_data"),
        default="global",
        params=lambda layer: {"scale": layer.op.scale},
        arrays=_arrays,
        check=_check,
        torch_forward=_torch_forward,
        small_cases=(
            _case("up-2d-odd", (2, 3, 5, 7), 2),  # rows of 14 outputs: no float4s
            _case("up-2d-x3", (1, 2, 3, 5), 3),  # a run-time scale; rows of 15
            _case("up-2d-bands", (1, 256, 10, 4), 2),  # bands of 3 rows, the last of 1; float4 rows
            _case("up-3d", (1, 2, 3, 5, 6), 2),  # depth 2 planes a slab; rows of 12: float4s
            _case("up-3d-x3", (2, 1, 2, 3, 3), 3),
        ),  # s^3 = 27 gradients an input, rows of 9
    )
)
UPSAMPLE.add(
    "global",
    fwd=launch(_fwd_global, "upsample.cu:upsample_fwd_global"),
    bwd_data=launch(_bwd_global, "upsample.cu:upsample_bwd_global"),
)
UPSAMPLE.add(
    "shared",
    fwd=launch(_fwd_shared, "upsample.cu:upsample_fwd_shared"),
    bwd_data=launch(_bwd_shared, "upsample.cu:upsample_bwd_shared"),
)
