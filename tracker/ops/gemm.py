"""The tiled GEMM that every matrix-shaped variant launches (kernels/common.cuh, kernels/gemm.cu):
its tile sizes, handed to NVRTC as ``-D`` options from here, its launch geometry, and the bias
gradient. Not an op itself: conv and linear launch it.

C[m][n] = sum_k A(m, k) B(k, n) in tiles of TILE_M x TILE_N x TILE_K; each thread accumulates a
THREAD_M x THREAD_N register block, so a block has (TILE_M / THREAD_M) x (TILE_N / THREAD_N)
threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracker.ops.launch import THREADS, Backend, tiles

DEFINES = {"TILE_M": 64, "TILE_N": 64, "TILE_K": 16, "THREAD_M": 4, "THREAD_N": 4}
TILE_M, TILE_N = DEFINES["TILE_M"], DEFINES["TILE_N"]
GEMM_THREADS = (TILE_M // DEFINES["THREAD_M"]) * (TILE_N // DEFINES["THREAD_N"])


def grid(n: int, m: int, depth: int = 1) -> tuple[int, int, int]:
    """The grid of a GEMM-shaped kernel whose output is m rows by n columns (x walks n)."""
    return tiles(n, TILE_N), tiles(m, TILE_M), depth


@dataclass(frozen=True)
class Gemm:
    """One dense GEMM launch (kernels/gemm.cu): C (M x N, leading dimension N) = A (M x K) times
    B (K x N), A and B row-major with leading dimensions ``lda`` and ``ldb`` as the kernel reads
    them (``gemm_tn`` reads A transposed, ``gemm_nt`` B). ``a_mask``: read A through a ReLU mask
    (the fused backward); ``bias`` per row or per column; ``relu`` on the result; ``accumulate``
    adds to C."""

    kernel: str  # gemm_nn, gemm_tn, gemm_nt
    M: int
    N: int
    K: int
    lda: int
    ldb: int
    bias_per_row: bool = False
    relu: bool = False
    accumulate: bool = False

    def launch(self, b: Backend, a: Any, bmat: Any, c: Any, a_mask: Any = None, bias: Any = None) -> None:
        b.launch("gemm.cu", self.kernel, grid(self.N, self.M)[:2], (GEMM_THREADS,),
                 (a, a_mask, bmat, c, self.M, self.N, self.K, self.lda, self.ldb, bias, int(self.bias_per_row),
                  int(self.relu), int(self.accumulate)))


BIAS_GRAD = "gemm.cu:bias_grad"
# What the fused variants (conv and linear) do with the GEMM's epilogue and loaders.
FUSED_FWD = "bias + ReLU in the GEMM epilogue; the ReLU layer launches nothing"
FUSED_BWD = "reads dy through the ReLU mask"


def bias_grad(b: Backend, dy: Any, relu_y: Any, db: Any, N: int, K: int, L: int) -> None:
    """db[k] = sum over images and positions of dy (through the ReLU mask where given)."""
    b.launch("gemm.cu", "bias_grad", (K,), (THREADS,), (dy, relu_y, db, N, K, L))
