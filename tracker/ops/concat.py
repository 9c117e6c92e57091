"""Channel concatenation of two inputs (kernels/concat.cu), 2-D or 3-D: ``x`` (C1 channels) and
``x2`` (C2) into ``y``; the backward splits ``dy`` into ``dx`` and ``dx2`` (either may be None: that
input needs no gradient). A grid-stride copy per phase (float4s where both inputs' images are
whole float4s), and a variant that copies through a tile in shared memory with cp.async.

The layer's parameter is C2, the second input's channels: a network case (``Op.case``) carries
only the first input's shape."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from tracker import reference as ref
from tracker.errors import TrackerError
from tracker.ops.launch import THREADS, Arrays, Backend, blocks
from tracker.ops.registry import OPS, Case, Op, launch
from tracker.ops.selftest import ELEMENTWISE, Check, f32

SOURCE = "concat.cu"
TILE = 4 * THREADS  # elements a block of the shared variant copies at a time (4 KiB)


def _second(layer) -> int:
    """C2 of a concat layer; the kernels join two inputs."""
    if len(layer.input_shapes) != 2:
        raise TrackerError(f"{layer.name}: concat kernels join two inputs, not {len(layer.input_shapes)}")
    return layer.input_shapes[1][0]


def seam(joined_shape: tuple, c2: int) -> tuple[int, int, int]:
    """(N, A, B) of the joined tensor: images, and the floats an image takes from each input."""
    N, C, *spatial = joined_shape
    if not 0 < c2 < C:
        raise TrackerError(f"concat: the second input's {c2} channels do not fit the output's {C}")
    S = math.prod(spatial)
    return N, (C - c2) * S, c2 * S


def _vector(A: int, B: int) -> int:
    return 4 if A % 4 == 0 and B % 4 == 0 else 1


def _inputs(a: Arrays, c2: int) -> tuple[int, int, int]:
    """The forward's (N, A, B), once both inputs are there (a null x2 would be read on the GPU)."""
    if a.x is None or a.x2 is None:
        raise TrackerError("concat's forward needs both inputs (Arrays.x and Arrays.x2)")
    return seam(a.y.shape, c2)


def _fwd_global(b: Backend, a: Arrays, c2: int) -> None:
    N, A, B = _inputs(a, c2)
    b.launch(SOURCE, "concat_fwd_global", (blocks(a.y.size // _vector(A, B)),), (THREADS,), (a.x, a.x2, a.y, N, A, B))


def _fwd_shared(b: Backend, a: Arrays, c2: int) -> None:
    N, A, B = _inputs(a, c2)
    b.launch(
        SOURCE,
        "concat_fwd_shared",
        (blocks(a.y.size, TILE),),
        (THREADS,),
        (a.x, a.x2, a.y, N, A, B, TILE),
        shared_bytes=4 * TILE,
    )


def _bwd_global(b: Backend, a: Arrays, c2: int) -> None:
    N, A, B = seam(a.dy.shape, c2)
    b.launch(
        SOURCE, "concat_bwd_global", (blocks(a.dy.size // _vector(A, B)),), (THREADS,), (a.dy, a.dx, a.dx2, N, A, B)
    )


def _bwd_shared(b: Backend, a: Arrays, c2: int) -> None:
    N, A, B = seam(a.dy.shape, c2)
    b.launch(
        SOURCE,
        "concat_bwd_shared",
        (blocks(a.dy.size, TILE),),
        (THREADS,),
        (a.dy, a.dx, a.dx2, N, A, B, TILE),
        shared_bytes=4 * TILE,
    )


def _shapes(case: Case) -> tuple[tuple, tuple, tuple]:
    """(x, x2, y) of a case."""
    x, c2 = case.shapes["x"], case.params["c2"]
    return x, (x[0], c2, *x[2:]), (x[0], x[1] + c2, *x[2:])


def _check(c: Check, rng: np.random.Generator, case: Case) -> None:
    x, x2, y = _shapes(case)
    c2 = case.params["c2"]
    xh, x2h = f32(rng, x), f32(rng, x2)
    a = Arrays(x=c.put(xh), x2=c.put(x2h), y=c.out(y))
    c.run("fwd", a, c2=c2)
    c.compare("fwd", "y", a.y, ref.concat_fwd(xh.astype(np.float64), x2h.astype(np.float64)), ELEMENTWISE)
    dyh = f32(rng, y)
    a.dy, a.dx, a.dx2 = c.put(dyh), c.out(x), c.out(x2)
    c.run("bwd_data", a, c2=c2)
    dx, dx2 = ref.concat_bwd(dyh.astype(np.float64), x[1])
    c.compare("bwd_data", "dx", a.dx, dx, ELEMENTWISE)
    c.compare("bwd_data", "dx2", a.dx2, dx2, ELEMENTWISE)


def _arrays(case: Case) -> dict[str, tuple[int, ...]]:
    x, x2, y = _shapes(case)
    return {"x": x, "x2": x2, "y": y, "dy": y, "dx": x, "dx2": x2}


def _case(name: str, x: tuple, c2: int) -> Case:
    return Case("concat", name, {"x": x}, {"c2": c2})


# No torch_forward: its hook takes one input (h, params, labels), and concat needs two.
CONCAT = OPS.register(
    Op(
        "concat",
        ("fwd", "bwd_data"),
        default="global",
        params=lambda layer: {"c2": _second(layer)},
        arrays=_arrays,
        check=_check,
        unsupported=lambda layer: None if len(layer.inputs) == 2 else f"{len(layer.inputs)} inputs",
        small_cases=(
            _case("cat-2d-odd", (2, 3, 5, 7), 2),  # images of 105 + 70 floats: no float4s
            _case("cat-2d-tiles", (3, 5, 9, 11), 3),  # 2,376 floats: 3 tiles, the last short
            _case("cat-2d-vec", (2, 4, 3, 4), 2),  # 48 + 24: float4s
            _case("cat-3d", (2, 2, 3, 4, 5), 3),  # 120 + 180: float4s
            _case("cat-3d-odd", (1, 1, 3, 3, 3), 2),
        ),  # 27 + 54
    )
)
CONCAT.add(
    "global",
    fwd=launch(_fwd_global, "concat.cu:concat_fwd_global"),
    bwd_data=launch(_bwd_global, "concat.cu:concat_bwd_global"),
)
CONCAT.add(
    "shared",
    fwd=launch(_fwd_shared, "concat.cu:concat_fwd_shared"),
    bwd_data=launch(_bwd_shared, "concat.cu:concat_bwd_shared"),
)
# No copy: the producers write straight into their slice of the joined tensor, and the readers of
# its gradient read theirs (tracker/gpu/network.py, in_place). A channel slice is contiguous only at
# batch 1 (an image stride in every kernel that writes or reads a slice would lift that); elsewhere
# the global copy runs. Not the default: it applies at batch 1 alone, and it is not measured yet.
_COPY = {
    phase: replace(run, note="in place at batch 1 (nothing launches); elsewhere global's copy")
    for phase, run in CONCAT.variants["global"].launches.items()
}
CONCAT.add("inplace", in_place=True, fallback="global", fwd=_COPY["fwd"], bwd_data=_COPY["bwd_data"])
