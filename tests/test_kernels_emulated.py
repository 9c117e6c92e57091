"""Every kernel variant of the op registry (tracker/ops) against the NumPy reference, on a CPU
emulation of CUDA (tests/emu), through the same checks `tracker selftest` runs on a GPU: the
index arithmetic, the launch geometry, constant-memory chunks, per-image loops, the ReLU masks
of the fused variants, and that every output element is written (outputs start as NaN).
A GPU must still confirm all of it."""

import pytest

from tracker.ops import OPS
from tracker.ops.selftest import run_case, small_cases


@pytest.mark.parametrize("case", small_cases(), ids=lambda c: f"{c.op}-{c.layer}")
def test_every_variant_matches_the_reference(emulator, case):
    for variant in OPS[case.op].variants:
        emulator.log.clear()
        results = run_case(emulator, case, variant, seed=1)
        assert results and {r.phase for r in results} >= {"fwd", "bwd_data"}
        failed = [(r.variant, r.phase, r.output, r.error) for r in results if not r.passed]
        assert not failed, failed
        # what ran is what the registry says the variant launches (the compile check reads that)
        declared = {(k.source, k.name) for launch in OPS[case.op].variants[variant].launches.values()
                    for k in launch.kernels}
        assert {(r.source, r.kernel) for r in emulator.log} <= declared
