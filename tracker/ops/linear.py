"""linear (kernels/linear.cu, and the tiled GEMM of kernels/gemm.cu): a direct global-memory
kernel per phase, the shared-memory GEMM, and the GEMM fused with bias + ReLU."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np

from tracker import reference as ref
from tracker.ops.gemm import BIAS_GRAD, DEFAULT, FUSED_BWD, FUSED_FWD, Gemm, Tile, bias_grad, tiled
from tracker.ops.launch import THREADS, Arrays, Backend, blocks
from tracker.ops.registry import OPS, Case, Op, launch
from tracker.ops.selftest import REDUCTION, Check, f32, masked

SOURCE = "linear.cu"


def _flat(a: Any, batch: int) -> Any:
    return a.reshape(batch, -1)


def _fwd_global(b: Backend, a: Arrays) -> None:
    (N, n_out), n_in = a.y.shape, a.w.shape[1]
    b.launch(
        SOURCE, "linear_fwd_global", (blocks(N * n_out),), (THREADS,), (_flat(a.x, N), a.w, a.bias, a.y, N, n_in, n_out)
    )


def _fwd_gemm(b: Backend, a: Arrays, relu: bool = False, tile: Tile = DEFAULT) -> None:
    """y = x w^T + bias (ReLU)."""
    (N, n_out), n_in = a.y.shape, a.w.shape[1]
    Gemm("gemm_nt", M=N, N=n_out, K=n_in, lda=n_in, ldb=n_in, relu=relu).launch(
        b, _flat(a.x, N), a.w, a.y, bias=a.bias, tile=tile
    )


def _bwd_data_global(b: Backend, a: Arrays) -> None:
    (N, n_out), n_in = a.dy.shape, a.w.shape[1]
    b.launch(
        SOURCE, "linear_bwd_data_global", (blocks(N * n_in),), (THREADS,), (a.dy, a.w, _flat(a.dx, N), N, n_in, n_out)
    )


def _bwd_data_gemm(b: Backend, a: Arrays, relu: bool = False, tile: Tile = DEFAULT) -> None:
    """dx = dy w (dy through the ReLU mask when fused)."""
    (N, n_out), n_in = a.dy.shape, a.w.shape[1]
    Gemm("gemm_nn", M=N, N=n_in, K=n_out, lda=n_out, ldb=n_in).launch(
        b, a.dy, a.w, _flat(a.dx, N), a_mask=a.y if relu else None, tile=tile
    )


def _bwd_weight_global(b: Backend, a: Arrays) -> None:
    (N, n_out), n_in = a.dy.shape, a.dw.shape[1]
    b.launch(
        SOURCE,
        "linear_bwd_weight_global",
        (blocks(n_out * n_in),),
        (THREADS,),
        (a.dy, _flat(a.x, N), a.dw, N, n_in, n_out),
    )
    if a.db is not None:
        bias_grad(b, a.dy, None, a.db, N, n_out, 1)


def _bwd_weight_gemm(b: Backend, a: Arrays, relu: bool = False, tile: Tile = DEFAULT) -> None:
    """dw = dy^T x."""
    (N, n_out), n_in = a.dy.shape, a.dw.shape[1]
    mask = a.y if relu else None
    Gemm("gemm_tn", M=n_out, N=n_in, K=N, lda=n_out, ldb=n_in).launch(
        b, a.dy, _flat(a.x, N), a.dw, a_mask=mask, tile=tile
    )
    if a.db is not None:
        bias_grad(b, a.dy, mask, a.db, N, n_out, 1)


def _check(c: Check, rng: np.random.Generator, case: Case) -> None:
    x, w = case.shapes["x"], case.shapes["w"]
    xh, wh, bh = f32(rng, x), f32(rng, w, 1 / math.sqrt(w[1])), f32(rng, (w[0],))
    fused = c.variant == "fused"
    expected = ref.linear_fwd(xh.astype(np.float64), wh, bh)
    expected = ref.relu_fwd(expected) if fused else expected
    a = Arrays(x=c.put(xh), w=c.put(wh), bias=c.put(bh), y=c.out(expected.shape))
    c.run("fwd", a)
    yh = c.compare("fwd", "y", a.y, expected, REDUCTION)
    dyh = f32(rng, expected.shape)
    dy_eff = masked(dyh, yh, fused)
    a.dy, a.dx = c.put(dyh), c.out(x)
    c.run("bwd_data", a)
    c.compare("bwd_data", "dx", a.dx, ref.linear_bwd_data(dy_eff, wh.astype(np.float64), x), REDUCTION)
    a.dw, a.db = c.out(w), c.out(w[:1])
    c.run("bwd_weight", a)
    dw, db = ref.linear_bwd_weight(dy_eff, xh.astype(np.float64))
    c.compare("bwd_weight", "dw", a.dw, dw, REDUCTION)
    c.compare("bwd_weight", "db", a.db, db, REDUCTION)


def _arrays(case: Case) -> dict[str, tuple[int, ...]]:
    x, w = case.shapes["x"], case.shapes["w"]
    y = (x[0], w[0])
    return {"x": x, "w": w, "bias": (w[0],), "y": y, "dy": y, "dx": x, "dw": w, "db": (w[0],)}


def _library(case: Case, phase: str):
    """cuBLAS through PyTorch, the same phase at the same shapes."""
    import torch
    import torch.nn.functional as F

    x = torch.randn(*case.shapes["x"], device="cuda")
    w = torch.randn(*case.shapes["w"], device="cuda") * 0.01
    dy = torch.ones(case.shapes["x"][0], case.shapes["w"][0], device="cuda")
    return {"fwd": lambda: F.linear(x, w), "bwd_data": lambda: dy @ w, "bwd_weight": lambda: dy.t() @ x}[phase]


def _torch_forward(h, wb, labels):
    import torch.nn.functional as F

    return F.linear(h.flatten(1), *wb)


LINEAR = OPS.register(
    Op(
        "linear",
        ("fwd", "bwd_data", "bwd_weight"),
        default="shared",
        params=lambda layer: {},
        arrays=_arrays,
        check=_check,
        flat_input=True,
        library=_library,
        torch_forward=_torch_forward,
        small_cases=(Case("linear", "fc", {"x": (3, 70), "w": (66, 70)}),),  # two GEMM tiles of N, five of K
    )
)
LINEAR.add(
    "global",
    fwd=launch(_fwd_global, "linear.cu:linear_fwd_global"),
    bwd_data=launch(_bwd_data_global, "linear.cu:linear_bwd_data_global"),
    bwd_weight=launch(_bwd_weight_global, "linear.cu:linear_bwd_weight_global", *BIAS_GRAD),
)
LINEAR.add(
    "shared",
    fwd=tiled(_fwd_gemm, "gemm.cu:gemm_nt"),
    bwd_data=tiled(_bwd_data_gemm, "gemm.cu:gemm_nn"),
    bwd_weight=tiled(_bwd_weight_gemm, "gemm.cu:gemm_tn", *BIAS_GRAD),
)
LINEAR.add(
    "fused",
    absorbs="relu",
    fallback="shared",
    fwd=tiled(partial(_fwd_gemm, relu=True), "gemm.cu:gemm_nt", note=FUSED_FWD),
    bwd_data=tiled(partial(_bwd_data_gemm, relu=True), "gemm.cu:gemm_nn", note=FUSED_BWD, masked=True),
    bwd_weight=tiled(partial(_bwd_weight_gemm, relu=True), "gemm.cu:gemm_tn", *BIAS_GRAD, note=FUSED_BWD, masked=True),
)
