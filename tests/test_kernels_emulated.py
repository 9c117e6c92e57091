"""Every kernel variant of the op registry (tracker/ops) against the NumPy reference, on a CPU
emulation of CUDA (tests/emu), through the same checks `tracker selftest` runs on a GPU: the
index arithmetic, the launch geometry, constant-memory chunks, chunks of images, the ReLU masks
of the fused variants, and that every output element is written (outputs start as NaN).
A GPU must still confirm all of it."""

import pytest
from tile_schedules import RING, TRANSFORMS

from tracker.ops import OPS
from tracker.ops.gemm import DEFAULT, MASKED, RELU_MASK
from tracker.ops.selftest import run_case, small_cases

pytestmark = pytest.mark.slow  # every test here builds the kernels with g++ and runs them on OS threads


@pytest.mark.parametrize("case", small_cases(), ids=lambda c: f"{c.op}-{c.layer}")
def test_every_variant_matches_the_reference(emulator, case, monkeypatch):
    built: dict[str, set] = {}  # kernel -> the registry's -D it was launched with beyond the tile's
    launch = emulator.launch

    def spy(source, kernel, grid, block, args, shared_bytes=0, defines=()):
        built.setdefault(kernel, set()).add(tuple(d for d in defines if d[0] == RELU_MASK))
        return launch(source, kernel, grid, block, args, shared_bytes, defines)

    monkeypatch.setattr(emulator, "launch", spy)
    for variant in OPS[case.op].variants:
        emulator.log.clear()
        built.clear()
        results = run_case(emulator, case, variant, seed=1)
        assert results and {r.phase for r in results} == set(OPS[case.op].phases)
        failed = [(r.variant, r.phase, r.output, r.error) for r in results if not r.passed]
        assert not failed, failed
        # what ran is what the registry says the variant launches (the compile check reads that),
        # built as its table entry says (the fused backward's GEMM with RELU_MASK 1)
        launches = OPS[case.op].variants[variant].launches.values()
        declared = {(k.source, k.name) for launch in launches for k in launch.kernels}
        assert {(r.source, r.kernel) for r in emulator.log} <= declared
        masked = {launch.kernels[0].name for launch in launches if launch.defines}
        assert {k for k, builds in built.items() if builds == {MASKED}} == masked, variant
        assert all(builds == {()} for k, builds in built.items() if k not in masked), (variant, built)


def test_the_gemm_convolution_folds_chunks_of_images_into_each_gemm(emulator, monkeypatch):
    """A buffer of two images' im2col: a batch of 3 runs as chunks of 2 and 1, each one im2col
    (or col2im) and one GEMM, the weight gradient adding the second chunk's to the first's."""
    from tracker.model import algorithms
    from tracker.ops.registry import Case

    case = Case("conv", "chunks", {"x": (3, 3, 9, 9), "w": (5, 3, 3, 3)}, {"stride": 1, "pad": 1})
    monkeypatch.setattr(algorithms, "COL_FLOATS", 2 * 3 * 3 * 3 * 9 * 9)
    emulator.log.clear()
    results = run_case(emulator, case, "gemm", seed=2)
    assert results and all(r.passed for r in results), [(r.phase, r.output, r.error) for r in results if not r.passed]
    launched = [(r.kernel, r.grid) for r in emulator.log]
    assert [k for k, _ in launched if k != "bias_grad"] == ["im2col", "gemm_nn"] * 2 + [
        "gemm_tn_images",
        "col2im",
    ] * 2 + ["im2col", "gemm_nt_images"] * 2
    assert [g[0] for k, g in launched if k == "gemm_nn"] == [2, 1]  # 162 and 81 columns in 128-wide tiles


@pytest.mark.parametrize("tile", [DEFAULT, RING], ids=lambda t: t.label)
def test_the_l1_bypass_build_stages_the_gemm_operands_and_matches_too(tmp_path, tile):
    """The cg build's GEMM stages every operand through registers (a 4-byte cp.async would fill
    L1): that path, emulated from the same source with -DTRACKER_L1_BYPASS, against the reference,
    in the default double buffer and in a ring of three (the fused backward reads its mask in
    element()). The staged build (-DTRACKER_STAGED) is this code with L1 cached: on the CPU the
    same program (tests/test_kernels.py compares their SASS)."""
    from emu.emulator import Emulator

    bypass = Emulator(tmp_path, l1_bypass=True)
    for case in (c for c in small_cases() if c.op in ("conv", "linear")):
        for variant, v in OPS[case.op].variants.items():
            if any(launch.tunable for launch in v.launches.values()) and variant not in TRANSFORMS:
                failed = [
                    (variant, r.phase, r.output, r.error)
                    for r in run_case(bypass, case, variant, seed=3, tile=tile)
                    if not r.passed
                ]
                assert not failed, (case.layer, failed)


@pytest.mark.parametrize(
    "op, x, size",
    [
        ("maxpool", (1, 300, 13, 13), 3),  # 300 planes: bands of 4 input rows, 2 output rows
        ("maxpool", (2, 3, 8, 8), 2),
        ("maxpool3d", (1, 2, 7, 7, 7), 3),  # overlapping in depth too
    ],
)
def test_max_pool_ties_route_each_gradient_to_the_first_maximum_as_the_reference_does(emulator, op, x, size):
    """Inputs of three values: most windows hold several equal maxima, and overlapping windows
    share them. Every variant gives each window's gradient to its first maximum in window order
    (the reference's rule, PyTorch's), the shared forward saves that one's offset. Routing to the
    last maximum instead would move much of the gradient: the reference on the input flipped (the
    windows tile these shapes exactly, so a flip turns each window's first maximum into its last)."""
    import numpy as np

    from tracker import reference as ref
    from tracker.ops.launch import Arrays

    rng = np.random.default_rng(4)
    xh = rng.integers(0, 3, size=x).astype(np.float32)
    y = ref.maxpool_fwd(xh, size, 2)
    dyh = rng.normal(size=y.shape).astype(np.float32)
    dy64 = dyh.astype(np.float64)
    expected = ref.maxpool_bwd(dy64, xh, size, 2)
    spatial = tuple(range(2, len(x)))
    last_max = np.flip(ref.maxpool_bwd(np.flip(dy64, spatial), np.flip(xh, spatial), size, 2), spatial)
    assert np.abs(last_max - expected).sum() > 0.1 * np.abs(expected).sum()  # the rule matters here
    for variant, v in OPS[op].variants.items():
        a = Arrays(
            x=emulator.asarray(xh),
            y=emulator.empty(y.shape),
            dy=emulator.asarray(dyh),
            dx=emulator.empty(x),
            argmax=emulator.asarray(np.full(y.shape, -1, np.int32)),
        )
        OPS[op].launch(emulator, variant, "fwd", a, size=size, stride=2)
        OPS[op].launch(emulator, variant, "bwd_data", a, size=size, stride=2)
        np.testing.assert_array_equal(emulator.asnumpy(a.y), y, err_msg=variant)
        np.testing.assert_allclose(emulator.asnumpy(a.dx), expected, rtol=1e-6, atol=1e-6, err_msg=variant)
        if v.saves_argmax:
            np.testing.assert_array_equal(emulator.asnumpy(a.argmax), ref.maxpool_indices(xh, size, 2))
