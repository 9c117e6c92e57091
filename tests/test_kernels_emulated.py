"""Every kernel variant, launched by tracker/gpu/launchers.py, against the NumPy reference, on a
CPU emulation of CUDA (tests/emu), through the same checks `tracker selftest` runs on a GPU: the
index arithmetic, the launch geometry, constant-memory chunks, per-image loops, the ReLU masks
of the fused variants, and that every output element is written (outputs start as NaN).
A GPU must still confirm all of it."""

import pytest

from tracker.gpu.kernels import VARIANTS
from tracker.gpu.selftest import Case, run_case

CASES = [
    Case("conv", "k70-s1-p1", dict(x=(2, 3, 9, 9), w=(70, 3, 3, 3), stride=1, pad=1)),  # two GEMM tiles of K
    Case("conv", "big-filters", dict(x=(1, 64, 13, 13), w=(5, 64, 11, 11), stride=2, pad=0)),  # 3 constant chunks
    Case("conv", "conv1-like", dict(x=(1, 3, 27, 27), w=(4, 3, 11, 11), stride=4, pad=0)),
    Case("linear", "fc", dict(x=(3, 70), w=(66, 70))),  # two GEMM tiles of N, five of K
    Case("relu", "odd", dict(x=(2, 3, 5, 7))),  # 210 elements: the float4 loop and its tail
    Case("maxpool", "3s2", dict(x=(2, 3, 13, 13), size=3, stride=2)),
    Case("maxpool", "3s2-tiles", dict(x=(1, 2, 35, 35), size=3, stride=2)),  # several 16 x 16 tiles
    Case("maxpool", "2s2", dict(x=(1, 2, 20, 20), size=2, stride=2)),
    Case("lrn", "strips", dict(x=(2, 7, 5, 8), size=5, alpha=0.5, beta=0.75, k=2.0)),  # 40 positions
    Case("softmax", "1000", dict(x=(3, 1000))),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.op}-{c.layer}")
def test_every_variant_matches_the_reference(emulator, case):
    for variant in VARIANTS[case.op]:
        results = run_case(emulator, case, variant, seed=1)
        assert results and {r.phase for r in results} >= {"fwd", "bwd_data"}
        failed = [(r.variant, r.phase, r.output, r.error) for r in results if not r.passed]
        assert not failed, failed
