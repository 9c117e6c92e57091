"""Every kernel variant, launched by tracker/gpu/launchers.py, against the NumPy reference, on a
CPU emulation of CUDA (tests/emu), through the same checks `tracker selftest` runs on a GPU: the
index arithmetic, the launch geometry, constant-memory chunks, per-image loops, the ReLU masks
of the fused variants, and that every output element is written (outputs start as NaN).
A GPU must still confirm all of it."""

import pytest

from tracker.gpu.kernels import VARIANTS
from tracker.gpu.selftest import SMALL_CASES, run_case



@pytest.mark.parametrize("case", SMALL_CASES, ids=lambda c: f"{c.op}-{c.layer}")
def test_every_variant_matches_the_reference(emulator, case):
    for variant in VARIANTS[case.op]:
        results = run_case(emulator, case, variant, seed=1)
        assert results and {r.phase for r in results} >= {"fwd", "bwd_data"}
        failed = [(r.variant, r.phase, r.output, r.error) for r in results if not r.passed]
        assert not failed, failed
