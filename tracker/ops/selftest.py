"""Every kernel variant against the NumPy reference, on any ``Backend``.

``tracker selftest`` runs these checks on a GPU at AlexNet's layer shapes; the test suite runs
the same checks on the CPU emulation at small shapes. Each op's ``check`` (in its module) feeds
fresh random float32 inputs; every output starts as NaN (an integer one as -1), so an element a
kernel never writes fails the check; the error is ||out - ref|| / ||ref|| against the float64
reference, under 1e-5 for element-wise ops and 1e-4 for reductions and convolutions (Winograd's
included: its measured error is of the implicit GEMM's order); an integer output (max-pool's
saved offsets) must be exact. Beside it each result reports the largest and the mean absolute
difference, each relative to the reference's largest and mean magnitude, so that an algorithm's
error (paper 004; Lavin & Gray's 4e-5 for F(2x2,3x3)) is data, not just a pass.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tracker.ops.launch import Arrays, Backend
from tracker.ops.registry import OPS, Case

if TYPE_CHECKING:
    from tracker.ops.gemm import Tile  # a type only: gemm imports the registry

ELEMENTWISE, REDUCTION = 1e-5, 1e-4
EXACT = 1e-12  # integer outputs (max-pool's saved offsets): any wrong one is over it


@dataclass(frozen=True)
class Result:
    op: str
    variant: str
    layer: str
    phase: str
    output: str
    error: float  # relative error; inf when an element was never written
    tolerance: float
    max_error: float = math.nan  # max |out - ref| / max |ref|
    mean_error: float = math.nan  # mean |out - ref| / mean |ref|

    @property
    def passed(self) -> bool:
        return self.error < self.tolerance


def f32(rng: np.random.Generator, shape: tuple, scale: float = 1.0) -> np.ndarray:
    return (rng.normal(size=shape) * scale).astype(np.float32)


def masked(dy: np.ndarray, y: np.ndarray, fused: bool) -> np.ndarray:
    """The gradient a fused variant's backward sees: dy where its ReLU passed, else 0."""
    return np.where(y > 0, dy, 0).astype(np.float64) if fused else dy.astype(np.float64)


def relative_errors(out: np.ndarray, expected: np.ndarray) -> tuple[float, float, float]:
    """(||out - ref|| / ||ref||, max |out - ref| / max |ref|, mean |out - ref| / mean |ref|); inf
    where an element was never written."""
    if np.isnan(out).any():
        return math.inf, math.inf, math.inf
    diff, size = np.abs(out.astype(np.float64) - expected), np.abs(expected)
    return (
        float(np.linalg.norm(diff)) / max(float(np.linalg.norm(expected)), 1e-30),
        float(diff.max(initial=0.0)) / max(float(size.max(initial=0.0)), 1e-30),
        float(diff.mean()) / max(float(size.mean()), 1e-30) if diff.size else 0.0,
    )


class Check:
    """Runs one case of one variant on a backend, collecting a Result per output."""

    def __init__(self, backend: Backend, case: Case, variant: str, tile: Tile | None = None):
        self.b, self.case, self.variant, self.tile = backend, case, variant, tile
        self.results: list[Result] = []

    def put(self, array: np.ndarray) -> Any:
        return self.b.asarray(array)

    def out(self, shape: tuple) -> Any:
        return self.b.asarray(np.full(shape, np.nan, dtype=np.float32))

    def out_offsets(self, shape: tuple) -> Any:
        """An int32 output of offsets, -1 (none) until written."""
        return self.b.asarray(np.full(shape, -1, dtype=np.int32))

    def run(self, phase: str, arrays: Arrays, **params: Any) -> None:
        OPS[self.case.op].launch(self.b, self.variant, phase, arrays, tile=self.tile, **params)

    def error_scale(self) -> float:
        """The variant's factor on the op's bound (a Check of PyTorch's phases has no variant of ours)."""
        return OPS[self.case.op].variant(self.variant).error_scale

    def compare(self, phase: str, name: str, device_out: Any, expected: np.ndarray, tol: float) -> np.ndarray:
        """``tol``: the op's bound for this output, scaled by the variant's error_scale."""
        host = self.b.asnumpy(device_out)
        error, largest, mean = relative_errors(host, expected)
        tol *= self.error_scale()
        self.results.append(Result(self.case.op, self.variant, self.case.layer, phase, name, error, tol, largest, mean))
        return host


def run_case(backend: Backend, case: Case, variant: str, seed: int = 0, tile: Tile | None = None) -> list[Result]:
    """``tile``: the GEMM schedule of the variant's GEMM-shaped launches;
    None runs the default."""
    OPS[case.op].variant(variant)  # an unknown name fails here, before any input is made
    return run_check(Check(backend, case, variant, tile), seed)


def run_check(check: Check, seed: int = 0) -> list[Result]:
    """``check``'s case through its op's checks on fresh inputs from ``seed``: what our kernels
    and PyTorch's phases (tracker/library/accuracy.py) are held to alike."""
    OPS[check.case.op].check(check, np.random.default_rng(seed), check.case)
    check.b.synchronize()
    return check.results


def small_cases() -> tuple[Case, ...]:
    """Every op's small cases: shapes that still reach every code path (several tiles,
    constant-memory chunks, vector loops with tails). The CPU emulation runs them; on a GPU they
    are what compute-sanitizer's racecheck can afford."""
    return tuple(case for op in OPS for case in op.small_cases)


def network_cases(net: Any, batch: int) -> Iterator[Case]:
    """One case per layer with kernels: the layer's own shapes at ``batch``."""
    for layer in net.layers:
        if (op := OPS.find(layer)) is not None:
            yield op.case(layer, batch)
