"""The default plan's convolution algorithm: without a tuning table, a rule picks each conv layer
phase's variant from what was measured, as cuDNN's heuristic mode picks an algorithm.

The rule: Winograd F(4x4) (``winograd_f4``) runs every phase where it applies (stride-1 3x3 and 5x5
filters); the implicit GEMM (``shared``, the op's default) everywhere else.

Where it comes from: the kernel benchmark of every conv variant at each AlexNet layer phase, batch
128, default tiles, on an H200 (SOURCE). Of the 12 phases Winograd applies to (conv2-conv5),
``winograd_f4`` is the fastest of the nine variants at 10 and within 12 % of the fastest at conv3's
forward (1.517 against the implicit GEMM's 1.365 ms) and data gradient (1.527 against the explicit
GEMM's 1.363 ms). At conv1 (11x11, stride 4) neither Winograd nor FFT applies, and the implicit
GEMM is the fastest. AlexNet's conv phases sum to 23.3 ms by the rule, 35.9 by the implicit GEMM
alone, 23.0 at the fastest of each. tests/test_conv_rule.py reads the table and holds the rule to it.
`tracker tune` measures every variant on the GPU at hand and overrides the rule per layer phase.

The rule picks the algorithm, not the GEMM tile: where a Winograd or FFT variant runs untuned, the
plan fits its batched GEMM's tile to the GEMM's M and N (tracker/ops/gemm.fitted, by tile
utilisation, not yet measured); the measurements above ran the default tile everywhere.
"""

from __future__ import annotations

from tracker.ops.conv2d import CONV
from tracker.ops.registry import Case

SOURCE = "tests/data/gpu-2026-11-26f-h200/RESULTS.md"  # the measurements the rule is read from
WHERE_IT_APPLIES = "winograd_f4"  # the fastest variant there, at 10 of 12 phases


def rule(case: Case, phase: str) -> str:
    """The variant the default plan runs at a conv case's phase."""
    fast = CONV.variant(WHERE_IT_APPLIES)
    return fast.name if fast.applies is None or fast.applies(case, phase) else CONV.default


CONV.rule = rule
