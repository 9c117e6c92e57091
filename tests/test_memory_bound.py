"""The bias gradient (kernels/gemm.cu bias_grad) and LRN's window kernels (kernels/lrn.cu): their
cuts into blocks, every path of each against NumPy on the CPU emulation (tests/emu), and what
their SASS must show: no integer division in the bias gradient, LRN's s^-beta without powf and
each input read once an element."""

from collections import Counter

import numpy as np
import pytest

from tracker.ops import gemm, lrn
from tracker.ops.selftest import run_case, small_cases


def test_the_bias_gradient_cuts_the_images_into_runs_that_fill_the_gpu():
    """AlexNet at batch 128: conv1's 64 channels in 16 runs of 8 images (1,024 blocks), conv3's 384
    in 3 runs of 43; fc6's 4,096 channels, 16 blocks across, in runs of BIAS_PER_THREAD images (a
    thread's column); a small layer in one run (bias_grad writes db, nothing to reduce)."""
    assert gemm.bias_rows(128, 64, 55 * 55) == 8
    assert gemm.bias_rows(128, 384, 13 * 13) == 43
    assert gemm.bias_rows(128, 4096, 1) == gemm.BIAS_PER_THREAD == 16
    assert gemm.bias_rows(2, 4, 25) == 2


def test_lrn_cuts_the_channels_into_runs_only_where_the_positions_are_few():
    """lrn1 (55 x 55 positions, 1,536 blocks at batch 128) walks all 96 channels; lrn2 (27 x 27,
    384 blocks) three runs of 86; a layer of few channels never runs fewer than MIN_RUN."""
    assert lrn.channel_run((128, 96, 55, 55)) == 96
    assert lrn.channel_run((128, 256, 27, 27)) == 86
    assert lrn.channel_run((1, 40, 4, 4)) == 40 < 2 * lrn.MIN_RUN


# (N, K, L, offset of dy's first float, offset of the mask's, or None: no mask): L = 1 (a linear
# layer's columns), odd rows whose 16-byte boundaries move from row to row, rows of whole float4s,
# a mask aligned unlike dy (scalars throughout), and rows longer than a block's threads.
SHAPES = [
    (5, 3, 7, 0, None),
    (5, 3, 7, 1, 1),
    (4, 3, 16, 0, 0),
    (4, 3, 16, 2, None),
    (3, 2, 17, 0, 1),
    (33, 300, 1, 0, 0),
    (40, 70, 1, 1, None),
    (3, 2, 259, 3, 3),
]


@pytest.mark.parametrize("runs", [False, True], ids=["one-run", "runs"])
@pytest.mark.parametrize("N, K, L, at, mask_at", SHAPES)
def test_the_bias_gradient_matches_numpy(emulator, monkeypatch, runs, N, K, L, at, mask_at):
    """Against a float64 sum, masked by the ReLU's output where one is given, from views that
    start off a 16-byte boundary; with ``runs``, every image a run of its own (the partials, then
    splitk_reduce), else one run (bias_grad writes db)."""
    if runs:
        monkeypatch.setattr(gemm, "BIAS_PER_THREAD", 0)
        monkeypatch.setattr(gemm, "WAVE", 1 << 20)
    else:
        monkeypatch.setattr(gemm, "BIAS_PER_THREAD", 1 << 20)
    rng = np.random.default_rng(N * K * L)
    size = N * K * L
    dy, y = rng.standard_normal(size + 4, dtype=np.float32), rng.standard_normal(size + 4, dtype=np.float32)
    mask = None if mask_at is None else emulator.asarray(y)[mask_at : mask_at + size]
    db = emulator.empty((K,))
    emulator.log.clear()
    gemm.bias_grad(emulator, emulator.asarray(dy)[at : at + size], mask, db, N, K, L)
    terms = dy[at : at + size].astype(np.float64)
    if mask_at is not None:
        terms = np.where(y[mask_at : mask_at + size] > 0, terms, 0.0)
    expected = terms.reshape(N, K, L).sum(axis=(0, 2))
    np.testing.assert_allclose(emulator.asnumpy(db), expected, rtol=1e-5, atol=1e-5)
    launched = [r.kernel for r in emulator.log]
    assert launched == (["bias_grad", "splitk_reduce"] if runs and N > 1 else ["bias_grad"])


def test_lrn_walks_runs_of_channels_like_all_of_them(emulator, monkeypatch):
    """The window kernels with the channels cut into runs (one channel a run, then runs of two or
    more: each reads its window's halo again) match the reference as the whole walk does."""
    cases = [c for c in small_cases() if c.op == "lrn" and c.params["size"] == lrn.WINDOW]
    for least in (1, 2):
        monkeypatch.setattr(lrn, "MIN_RUN", least)
        for case in cases:
            C, run = case.shapes["x"][1], lrn.channel_run(case.shapes["x"])
            assert least <= run < C
            emulator.log.clear()
            results = run_case(emulator, case, "shared", seed=4)
            assert results and all(r.passed for r in results), [(r.phase, r.error) for r in results]
            assert {r.grid[2] for r in emulator.log} == {-(-C // run)}, case.layer


@pytest.fixture(scope="module")
def sass_of():
    from tracker.gpu.compile import kernel_loops, module_sass

    return lambda source: kernel_loops(module_sass(source, "sm_90"))


def _count(ops: list[str], *prefixes: str) -> int:
    return sum(op.startswith(prefixes) for op in ops)


@pytest.mark.slow  # compiles gemm.cu with NVRTC
def test_the_bias_gradient_divides_nothing_and_loads_float4s(sass_of):
    """Read from the sm_90 SASS: no integer division (I2F.RP, MUFU.RCP, F2I, IMAD.HI: what the
    kernel's i / L and i % L an element compiled to) and no subroutine call; 128-bit loads."""
    ops, _ = sass_of("gemm.cu")["bias_grad"]
    divides = {op for op in ops if op.startswith(("I2F", "F2I", "MUFU.RCP", "IMAD.HI", "CALL"))}
    assert divides == set()
    assert _count(ops, "LDG.E.128") > 0


@pytest.mark.slow  # compiles lrn.cu with NVRTC
@pytest.mark.parametrize("kernel, inputs, most", [("lrn_fwd_window", 1, 40), ("lrn_bwd_window", 3, 64)])
def test_lrn_window_kernels_read_each_input_once_and_call_no_powf(sass_of, kernel, inputs, most):
    """Read from the sm_90 SASS of each window kernel's two walks (beta 0.75 and any other):
    each element stored costs one load of each input (x; dy, x, y), no subroutine call; the
    0.75 walk has no exp2 (MUFU.EX2), only reciprocal square roots (MUFU.RSQ), and issues at
    most ``most`` instructions an element (the shared-memory kernels they replaced: 168 and about
    290); the other walk takes exp2(-beta log2 s)."""
    _, loops = sass_of("lrn.cu")[kernel]
    walks = [loop for loop in loops if _count(loop, "STG")]
    for loop in walks:
        stores = _count(loop, "STG")
        assert _count(loop, "LDG") == inputs * stores and _count(loop, "CALL") == 0, Counter(loop)
    three_quarters = [loop for loop in walks if _count(loop, "MUFU.EX2", "MUFU.LG2") == 0]
    general = [loop for loop in walks if _count(loop, "MUFU.EX2") > 0]
    assert three_quarters and general, [Counter(loop) for loop in walks]
    for loop in three_quarters:
        assert _count(loop, "MUFU.RSQ") > 0 and len(loop) <= most * _count(loop, "STG"), Counter(loop)
