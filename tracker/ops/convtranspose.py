"""Transposed convolution (the 3-D U-Net's 2x2x2 stride-2 up-convolution), 2-D and 3-D, on the
convolution's own kernels with the roles swapped, and (``gemm``) one placing kernel of its own.

A transposed convolution of x by filters w (PyTorch's layout: C_in x C_out x kernel) is the data
gradient of the convolution by the same w (K = C_in, C = C_out) with x as its output gradient,
plus a bias per output channel, which the data-gradient kernels add in their epilogue. So:
  fwd         y  = conv bwd_data(dy = x, w) + bias
  bwd_data    dx = conv fwd(x = dy, w)
  bwd_weight  dw = conv bwd_weight(dy = x, x = dy); db = the sum of dy per channel
each in the conv variant of the same name (global: direct kernels; shared: implicit GEMM, tuned
like the convolution's).

``gemm`` runs the forward of a transposed convolution whose stride equals its kernel (the U-Nets'
up-convolutions) as one GEMM and a scatter: the windows do not overlap, so the data gradient's
implicit GEMM, which visits every tap of every output and keeps one in taps (1 in 8 at 2x2x2),
becomes col = W^T x (gemm.cu's gemm_tn_images over the images: taps x C_out rows, the input's
positions as columns) placed by kernels/convtranspose.cu, bias added. Elsewhere, and in the
backward, it runs shared's kernels. On a GPU the implicit GEMM takes 19x cuDNN's time for the 3-D
U-Net's last up-convolution at 128^3 (tests/data/gpu-2026-11-26f-h200)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracker import reference as ref
from tracker.ops.gemm import BIAS_GRAD, DEFAULT, SPLITK_REDUCE, Gemm, Tile, bias_grad
from tracker.ops.launch import THREADS, Arrays, Backend, blocks
from tracker.ops.registry import OPS, Case, Kernel, Op, PhaseLaunch
from tracker.ops.selftest import REDUCTION, Check, f32

CONV_OF = {2: "conv", 3: "conv3d"}  # the convolution op each dimensionality transposes
SOURCE = "convtranspose.cu"
_BIAS_GRAD = tuple(Kernel.parse(k) for k in BIAS_GRAD)


def _forward(data: PhaseLaunch):
    def run(b: Backend, a: Arrays, stride: int, **tile: Any) -> None:
        data.run(b, Arrays(dy=a.x, w=a.w, dx=a.y), stride=stride, pad=0, bias=a.bias, **tile)

    return run


def _data_gradient(fwd: PhaseLaunch):
    def run(b: Backend, a: Arrays, stride: int, **tile: Any) -> None:
        fwd.run(b, Arrays(x=a.dy, w=a.w, bias=None, y=a.dx), stride=stride, pad=0, **tile)

    return run


def _weight_gradient(weight: PhaseLaunch):
    def run(b: Backend, a: Arrays, stride: int, **tile: Any) -> None:
        weight.run(b, Arrays(x=a.dy, dy=a.x, dw=a.dw, db=None), stride=stride, pad=0, **tile)
        if a.db is not None:
            N, C, *spatial = a.dy.shape
            bias_grad(b, a.dy, None, a.db, N, C, math.prod(spatial))

    return run


def _swapped(conv: Op, variant: str) -> dict[str, PhaseLaunch]:
    """The conv variant's launches, each in the phase it serves here (see the module's docstring)."""
    launches = conv.variant(variant).launches
    data, fwd, weight = launches["bwd_data"], launches["fwd"], launches["bwd_weight"]
    note = f"{conv.kind} {variant}'s kernels, roles swapped"
    return {
        "fwd": PhaseLaunch(_forward(data), data.kernels, note, data.tunable),
        "bwd_data": PhaseLaunch(_data_gradient(fwd), fwd.kernels, note, fwd.tunable),
        # the conv's own bias gradient is skipped (db=None): this one's follows, the same kernel
        "bwd_weight": PhaseLaunch(
            _weight_gradient(weight),
            (*(k for k in weight.kernels if k not in _BIAS_GRAD), *_BIAS_GRAD),
            note,
            weight.tunable,
        ),
    }


def scatters(w_shape: tuple[int, ...], stride: int) -> bool:
    """Whether the windows tile the output without overlap: every kernel size equals the stride."""
    return all(k == stride for k in w_shape[2:])


def _gemm_forward(shared: PhaseLaunch):
    """y = the scatter of col = W^T x, plus the bias; shared's forward where windows overlap."""

    def run(b: Backend, a: Arrays, stride: int, tile: Tile = DEFAULT) -> None:
        if not scatters(a.w.shape, stride):
            return shared.run(b, a, stride=stride, tile=tile)
        N, C_in, *positions = a.x.shape
        C, *kernel = a.w.shape[1:]
        taps, columns = math.prod(kernel), math.prod(positions)
        col = b.empty((N, C * taps, columns))
        Gemm("gemm_tn_images", M=C * taps, N=N * columns, K=C_in, lda=C * taps, ldb=columns, per_image=columns).launch(
            b, a.w, a.x, col, tile=tile
        )
        D, H, W = [1] * (3 - len(positions)) + positions
        b.launch(
            SOURCE,
            "convtranspose_scatter",
            (blocks(math.prod(a.y.shape)),),
            (THREADS,),
            (col, a.bias, a.y, N, C, D, H, W, kernel[0] if len(kernel) == 3 else 1, kernel[-1]),
        )

    return run


def _gemm(conv: Op) -> dict[str, PhaseLaunch]:
    """The `gemm` variant: its forward (``_gemm_forward``), and shared's backward."""
    shared = _swapped(conv, "shared")
    own = (Kernel.parse(k) for k in ("gemm.cu:gemm_tn_images", SPLITK_REDUCE, f"{SOURCE}:convtranspose_scatter"))
    kernels = tuple(dict.fromkeys((*own, *shared["fwd"].kernels)))
    note = "stride = kernel: one GEMM (col = W^T x) and a scatter, bias added; otherwise shared's kernels"
    return {**shared, "fwd": PhaseLaunch(_gemm_forward(shared["fwd"]), kernels, note, tunable=True)}


def _scatters_at(case: Case, phase: str) -> bool:
    """Where `gemm`'s own kernels run: the forward of a convolution whose windows do not overlap."""
    return phase == "fwd" and scatters(case.shapes["w"], case.params["stride"])


def _check(c: Check, rng: np.random.Generator, case: Case) -> None:
    x, w, stride = case.shapes["x"], case.shapes["w"], case.params["stride"]
    xh, wh, bh = f32(rng, x), f32(rng, w, 1 / math.sqrt(math.prod(w[1:]))), f32(rng, (w[1],))
    expected = ref.convtranspose_fwd(xh.astype(np.float64), wh.astype(np.float64), bh, stride)
    a = Arrays(x=c.put(xh), w=c.put(wh), bias=c.put(bh), y=c.out(expected.shape))
    c.run("fwd", a, stride=stride)
    c.compare("fwd", "y", a.y, expected, REDUCTION)
    dyh = f32(rng, expected.shape)
    a.dy, a.dx = c.put(dyh), c.out(x)
    c.run("bwd_data", a, stride=stride)
    c.compare("bwd_data", "dx", a.dx, ref.convtranspose_bwd_data(dyh.astype(np.float64), wh, stride), REDUCTION)
    a.dw, a.db = c.out(w), c.out((w[1],))
    c.run("bwd_weight", a, stride=stride)
    dw, db = ref.convtranspose_bwd_weight(dyh.astype(np.float64), xh.astype(np.float64), w, stride)
    c.compare("bwd_weight", "dw", a.dw, dw, REDUCTION)
    c.compare("bwd_weight", "db", a.db, db, REDUCTION)


def _arrays(case: Case) -> dict[str, tuple[int, ...]]:
    x, w, stride = case.shapes["x"], case.shapes["w"], case.params["stride"]
    y = (x[0], w[1], *((n - 1) * stride + k for n, k in zip(x[2:], w[2:])))
    return {"x": x, "w": w, "bias": (w[1],), "y": y, "dy": y, "dx": x, "dw": w, "db": (w[1],)}


def _torch_forward(h, wb, labels, stride: int):
    import torch.nn.functional as F

    return (F.conv_transpose2d if h.dim() == 4 else F.conv_transpose3d)(h, *wb, stride=stride)


def _unsupported(layer) -> str | None:
    """The convolution's kernels take one kernel size and one stride in every dimension."""
    op = layer.op
    return "non-square" if len({*op.kernel}) > 1 or len({*op.stride}) > 1 else None


def _register(dims: int, kind: str, cases: tuple[Case, ...]) -> Op:
    conv = OPS[CONV_OF[dims]]
    op = OPS.register(
        Op(
            kind,
            ("fwd", "bwd_data", "bwd_weight"),
            default="shared",
            layer_kind="convtranspose",
            dims=dims,
            params=lambda layer: {"stride": layer.op.stride[0]},
            arrays=_arrays,
            check=_check,
            torch_forward=_torch_forward,
            unsupported=_unsupported,
            small_cases=cases,
        )
    )
    for variant in ("global", "shared"):
        launches = _swapped(conv, variant)
        op.add(variant, fwd=launches["fwd"], bwd_data=launches["bwd_data"], bwd_weight=launches["bwd_weight"])
    gemm = _gemm(conv)
    op.add("gemm", applies=_scatters_at, fwd=gemm["fwd"], bwd_data=gemm["bwd_data"], bwd_weight=gemm["bwd_weight"])
    return op


CONVTRANSPOSE = _register(
    2,
    "convtranspose",
    (
        Case("convtranspose", "2x2-s2", {"x": (2, 3, 4, 5), "w": (3, 5, 2, 2)}, {"stride": 2}),  # the U-Net's up-conv
        Case(
            "convtranspose", "3x3-s2", {"x": (1, 4, 3, 3), "w": (4, 70, 3, 3)}, {"stride": 2}
        ),  # overlaps; 2 tiles of C
    ),
)
CONVTRANSPOSE3D = _register(
    3,
    "convtranspose3d",
    (
        Case("convtranspose3d", "2x2x2-s2", {"x": (2, 3, 2, 3, 2), "w": (3, 4, 2, 2, 2)}, {"stride": 2}),
        Case("convtranspose3d", "3x3x3-s1", {"x": (1, 2, 3, 3, 4), "w": (2, 3, 3, 3, 3)}, {"stride": 1}),
    ),
)
