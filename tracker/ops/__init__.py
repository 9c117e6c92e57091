"""The op families and their registry. Each module here is one op: its variants and the kernels
each launches per phase, its compile-time parameters (``-D``), its launch geometry, its selftest
check against tracker/reference.py, its small cases and its PyTorch baseline. Importing this
package registers them all in ``OPS``; everything that runs, checks, compiles, lists or benchmarks
kernels loops over ``OPS``.

Pure Python and NumPy (no CuPy): launches go to whatever ``Backend`` is handed in.
"""

from __future__ import annotations

from tracker.ops import gemm
from tracker.ops.registry import OPS, Case, Kernel, Op, PhaseLaunch, Variant

# The op modules register themselves, in this order (the order of `tracker kernels` and --variant).
from tracker.ops import conv2d, winograd, fft, linear, relu, maxpool, lrn, softmax  # noqa: E402,F401  isort: skip
from tracker.ops import sigmoid, upsample, concat, batchnorm, accumulate, conv3d, convtranspose  # noqa: E402,F401  isort: skip
from tracker.ops import conv_rule  # noqa: E402,F401  the default plan's conv rule, once its variants are in


def defines() -> dict[str, int]:
    """Every ``-D`` the kernels are compiled with: the GEMM's tiles and each op's parameters."""
    return {**gemm.DEFINES, **OPS.defines()}


__all__ = ["OPS", "Case", "Kernel", "PhaseLaunch", "Op", "Variant", "defines"]
