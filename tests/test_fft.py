"""conv's fft variant, FFT tiling (kernels/fft.cu), on the CPU emulation of CUDA: which layers it
runs and which it leaves to the implicit GEMM, the tile side the model prices, overlapping tiles,
and its error against the float64 reference beside the implicit GEMM's."""

from __future__ import annotations

import numpy as np
import pytest

from tracker.model.algorithms import fft_side
from tracker.ops.fft import TILES, TWIDDLES, applies
from tracker.ops.registry import Case
from tracker.ops.selftest import run_case

pytestmark = pytest.mark.slow


def kernels(emulator, case: Case) -> tuple[list, list[str]]:
    emulator.log.clear()
    results = run_case(emulator, case, "fft")
    return results, [k.kernel for k in emulator.log]


def test_fft_runs_stride_1_layers_in_one_tile_an_image_and_leaves_the_rest_to_the_implicit_gemm(emulator):
    """All three phases: the weight gradient with dy's tiles as the filter (gemm_nt over the tiles);
    each phase's products in one launch, a GEMM a frequency."""
    case = Case("conv", "s1", {"x": (2, 5, 7, 7), "w": (6, 5, 3, 3)}, {"stride": 1, "pad": 1})
    results, launched = kernels(emulator, case)
    assert all(r.passed for r in results), [(r.phase, r.error) for r in results if not r.passed]
    frequencies = 16 * 9  # 7 outputs + 2 of overhang: 16-point tiles, half spectrum 16 x 9
    fwd = launched[: launched.index("fft_output_n16") + 1]
    assert fwd == [
        "fft_filter_n16",
        "fft_input_n16",
        "gemm_nn_batched",
        "fft_output_n16",
    ]  # every frequency, one launch
    assert [k.grid[1:] for k in emulator.log if k.kernel.endswith("_batched")] == [(frequencies, 1)] * 3
    assert launched.count("fft_output_n16") == 3  # forward, data gradient, weight gradient
    wgrad = launched[launched.index("gemm_nt_batched") - 2 :]  # dy's tiles (7 outputs in 14-wide steps: one an image)
    assert wgrad == ["fft_input_n16"] * 2 + ["gemm_nt_batched", "fft_output_n16", "bias_grad"]
    assert not any(k.startswith("conv2d_") for k in launched)
    strided = Case("conv", "s2", {"x": (1, 3, 9, 9), "w": (4, 3, 3, 3)}, {"stride": 2, "pad": 1})
    results, launched = kernels(emulator, strided)
    assert all(r.passed for r in results) and not any(k.startswith("fft") for k in launched)
    assert [applies((1, 1, 3, 3), 1, pad) for pad in (0, 2, 3)] == [True, True, False]
    assert not applies((1, 1, 1, 1), 1, 0) and not applies((1, 1, 32, 32), 1, 0) and applies((1, 1, 31, 31), 1, 0)


def test_the_tile_side_is_the_models():
    """conv3-5 (13 outputs, 3x3) in 16-point tiles, conv2 (27, 5x5) in 32: one tile an image; past
    32, 32-point tiles that overlap by r - 1."""
    assert [fft_side(13, 13, 3), fft_side(27, 27, 5), fft_side(5, 5, 3), fft_side(40, 40, 3)] == [16, 32, 8, 32]


def test_overlapping_32_point_tiles_and_the_twiddles():
    """The host's table: e^(-2 pi i k / 32) for k < 16, as cos and the imaginary part."""
    k = np.arange(16)
    w = np.exp(-2j * np.pi * k / 32)
    assert np.allclose(TWIDDLES[:16], w.real, atol=1e-7) and np.allclose(TWIDDLES[16:], w.imag, atol=1e-7)


def test_a_plane_wider_than_a_tile_is_cut_into_overlapping_tiles(emulator):
    case = Case("conv", "wide", {"x": (1, 3, 40, 40), "w": (2, 3, 3, 3)}, {"stride": 1, "pad": 1})
    results, launched = kernels(emulator, case)
    assert all(r.passed for r in results), [(r.phase, r.error) for r in results if not r.passed]
    # 40 outputs in 30-wide steps of 32-point tiles: 2 x 2 tiles, 32 x 17 frequencies; the 4 tiles
    # of a channel in one block of TILES[32] (the rest past the end), 16 threads a tile
    input_launch = next(r for r in emulator.log if r.kernel == "fft_input_n32")
    assert input_launch.grid == (1, 3, 1) and input_launch.block == (TILES[32] * 16, 1, 1)
    assert [k.grid[1] for k in emulator.log if k.kernel.endswith("_batched")] == [32 * 17] * 3


@pytest.mark.parametrize(
    "x, w, n",
    [
        ((300, 3, 2, 2), (4, 3, 2, 2), 2),  # one output an image: 2-point tiles
        ((130, 3, 3, 3), (5, 3, 2, 2), 4),
        ((70, 2, 7, 7), (3, 2, 3, 3), 8),
    ],
)
def test_the_small_tiles_run_in_blocks_of_many_and_the_last_block_stops_at_the_plane(emulator, x, w, n):
    """The tile sides no small case reaches, with more tiles (one an image) than a block holds."""
    case = Case("conv", f"n{n}", {"x": x, "w": w}, {"stride": 1, "pad": 0})
    results, launched = kernels(emulator, case)
    assert all(r.passed for r in results), [(r.phase, r.error) for r in results if not r.passed]
    forward = next(r for r in emulator.log if r.kernel == f"fft_input_n{n}")
    assert forward.grid == (-(-x[0] // TILES[n]), x[1], 1) and forward.block == (TILES[n] * n // 2, 1, 1)


@pytest.mark.parametrize(
    "x, w, pad",
    [
        ((1, 64, 13, 13), (16, 64, 3, 3), 1),  # AlexNet's conv3-5 plane: 16-point tiles
        ((1, 32, 27, 27), (8, 32, 5, 5), 2),  # conv2's: 32-point tiles
    ],
)
def test_its_error_stays_near_the_implicit_gemms_at_a_deep_contraction(emulator, x, w, pad):
    case = Case("conv", "deep", {"x": x, "w": w}, {"stride": 1, "pad": pad})
    fft = {(r.phase, r.output): r for r in run_case(emulator, case, "fft")}
    shared = {(r.phase, r.output): r for r in run_case(emulator, case, "shared")}
    for key in (("fwd", "y"), ("bwd_data", "dx"), ("bwd_weight", "dw")):
        assert fft[key].tolerance == shared[key].tolerance  # as accurate: held to the op's bound
        assert fft[key].passed
        assert fft[key].max_error < 1e-5 and fft[key].error < 5 * max(shared[key].error, 1e-7), key
