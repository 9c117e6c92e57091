"""conv's Winograd variants, F(2x2, rxr) and F(4x4, rxr) for 3x3 and 5x5 (kernels/winograd.cu), on the CPU
emulation of CUDA: its Cook-Toom matrices, which layers it runs Winograd on and which it leaves
to the implicit GEMM, its error against the float64 reference beside the implicit GEMM's at deep
contractions, and the error measures the selftest reports and records."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tracker.ops.registry import Case
from tracker.ops.selftest import REDUCTION, relative_errors, run_case
from tracker.ops.winograd import applies, matrices

pytestmark = pytest.mark.slow


def kernels(emulator, case: Case, variant: str) -> tuple[list, list[str]]:
    emulator.log.clear()
    results = run_case(emulator, case, variant)
    return results, [k.kernel for k in emulator.log]


def batched_points(emulator, kernel: str) -> list[int]:
    """The grid y of each batched GEMM launch of ``kernel``: its points' row tiles in turn (one
    each at these sizes, so the points)."""
    return [k.grid[1] for k in emulator.log if k.kernel == kernel]


def test_winograd_runs_stride_1_3x3_layers_and_leaves_the_rest_to_the_implicit_gemm(emulator):
    """Each phase's alpha^2 GEMMs are one launch (one a point made 16-64 launches a phase)."""
    case = Case("conv", "s1", {"x": (2, 5, 7, 7), "w": (6, 5, 3, 3)}, {"stride": 1, "pad": 1})
    results, launched = kernels(emulator, case, "winograd")
    assert all(r.passed for r in results)
    fwd = launched[: launched.index("winograd_output_a4") + 1]
    assert fwd == ["winograd_filter_a4", "winograd_input_a4", "gemm_nn_batched", "winograd_output_a4"]
    assert batched_points(emulator, "gemm_nn_batched") == [16, 16]  # 4x4 points, forward and data gradient
    assert launched.count("winograd_output_a4") == 3  # forward, data gradient, weight gradient
    wgrad = launched[len(launched) - launched[::-1].index("winograd_input_a4") - 2 :]  # from its first transform
    assert wgrad == ["winograd_input_a4"] * 2 + ["gemm_nt_batched", "winograd_output_a4", "bias_grad"]
    five = Case("conv", "5x5", {"x": (1, 3, 8, 9), "w": (4, 3, 5, 5)}, {"stride": 1, "pad": 2})
    results, launched = kernels(emulator, five, "winograd")
    assert all(r.passed for r in results) and batched_points(emulator, "gemm_nn_batched") == [36, 36]  # 6x6 points
    assert batched_points(emulator, "gemm_nt_batched") == [36]  # the weight gradient, F(5x5, 2x2): 6x6 points too
    assert not any(k.startswith("conv2d_") for k in launched)
    strided = Case("conv", "s2", {"x": (1, 3, 9, 9), "w": (4, 3, 3, 3)}, {"stride": 2, "pad": 1})
    results, launched = kernels(emulator, strided, "winograd")
    assert all(r.passed for r in results) and not any(k.startswith("winograd") for k in launched)
    assert [applies((1, 1, 3, 3), 1, pad) for pad in (0, 1, 2, 3)] == [True, True, True, False]


@pytest.mark.parametrize("w, pad, alpha", [((6, 5, 3, 3), 1, 6), ((4, 5, 5, 5), 2, 8), ((3, 5, 3, 3), 0, 6)])
def test_winograd_f4_runs_4x4_output_tiles(emulator, w, pad, alpha):
    """F(4x4, 3x3) on alpha 6 and F(4x4, 5x5) on alpha 8: alpha^2 GEMMs a phase, ragged last tiles
    (7 x 7 outputs in 4 x 4 tiles), padding, and the data gradient's wider padding."""
    case = Case("conv", "f4", {"x": (2, 5, 7, 7), "w": w}, {"stride": 1, "pad": pad})
    results, launched = kernels(emulator, case, "winograd_f4")
    assert all(r.passed for r in results), [(r.phase, r.error) for r in results if not r.passed]
    fwd = launched[: launched.index(f"winograd_output_a{alpha}") + 1]
    assert fwd == [
        f"winograd_filter_a{alpha}",
        f"winograd_input_a{alpha}",
        "gemm_nn_batched",
        f"winograd_output_a{alpha}",
    ]
    assert launched.count(f"winograd_output_a{alpha}") == 3
    assert batched_points(emulator, "gemm_nt_batched") == [alpha**2]
    assert applies((1, 1, 5, 5), 1, 4) and not applies((1, 1, 5, 5), 1, 5) and not applies((1, 1, 7, 7), 1, 3)


@pytest.mark.parametrize(
    "x, w, pad, grid, threads, shared",
    [
        # 7 x 7 outputs, 16 tiles a plane: whole planes, two a block (of 32 tiles: too few for WAVE blocks)
        ((2, 5, 7, 7), (6, 5, 3, 3), 1, (5, 6), (32, 32), (4 * 2 * 10 * 7, 4 * 2 * 8 * 7)),
        # 13 x 13 tiles a plane: bands of two tile rows, the last one row
        ((1, 2, 25, 25), (3, 2, 3, 3), 1, (2 * 7, 3 * 7), (32, 32), (4 * 6 * 25, 4 * 4 * 25)),
        # 260 tiles a row: a band of one row, more tiles than a block has threads
        ((1, 1, 2, 520), (2, 1, 3, 3), 1, (1, 2), (256, 256), (4 * 4 * 520, 4 * 2 * 520)),
    ],
)
def test_the_transforms_stage_whole_planes_or_bands_of_tile_rows(emulator, x, w, pad, grid, threads, shared):
    """The forward's input and output transforms (F(2x2,3x3)): grid, threads and shared memory of
    each, every phase within its bound of the reference."""
    case = Case("conv", "bands", {"x": x, "w": w}, {"stride": 1, "pad": pad})
    results, _ = kernels(emulator, case, "winograd")
    assert all(r.passed for r in results), [(r.phase, r.error) for r in results if not r.passed]
    fwd = [k for k in emulator.log if k.kernel in ("winograd_input_a4", "winograd_output_a4")][:2]
    assert [k.grid[0] for k in fwd] == list(grid)
    assert [k.block[0] for k in fwd] == list(threads)
    assert [k.shared_bytes for k in fwd] == list(shared)


def test_a_transform_block_holds_about_a_blocks_worth_of_tiles_within_its_shared_memory():
    """``blocking``: (planes a block, tile rows of each) at AlexNet's batch 128 and beside it."""
    from tracker.ops.winograd import BLOCK_BYTES, blocking

    def small(rows: int) -> int:  # a few rows of a narrow plane
        return 4 * 18 * rows

    assert blocking(384 * 128, 4, 4, small) == (16, 4)  # conv3-5's 13 x 13 in 4 x 4 tiles: 16 planes of 16
    assert blocking(256 * 128, 14, 14, small) == (1, 14)  # conv2's 27 x 27 in 2 x 2 tiles: a plane
    assert blocking(64 * 128, 64, 64, small) == (1, 4)  # 128 x 128: bands of 4 tile rows
    assert blocking(2, 4, 4, small) == (2, 4)  # a small layer: blocks of 32 tiles
    assert blocking(64 * 128, 64, 64, lambda rows: BLOCK_BYTES // 2 * rows) == (1, 2)  # wide rows: fewer
    assert blocking(384 * 128, 4, 4, lambda rows: BLOCK_BYTES // 4) == (4, 4)  # large planes: fewer


def test_each_transform_launch_says_how_many_bytes_it_was_handed(emulator):
    """The benchmark's transform bandwidth reads each launch's array bytes, the
    device arrays it was handed (tracker.ops.contract.array_bytes), and sums a phase's transforms
    (kernel_names.traffic): the forward's filter transform reads w and writes U (16 points x M x
    C), the input transform x and V (16 x C x tiles), the output transform the products and the
    bias and writes y."""
    from tracker.kernel_names import traffic

    case = Case("conv", "s1", {"x": (2, 5, 7, 7), "w": (6, 5, 3, 3)}, {"stride": 1, "pad": 1})
    kernels(emulator, case, "winograd")
    fwd = emulator.log[: emulator.log.index(next(k for k in emulator.log if k.kernel == "winograd_output_a4")) + 1]
    tiles, f32 = 2 * 4 * 4, 4
    x, w, y, bias = 2 * 5 * 7 * 7 * f32, 6 * 5 * 9 * f32, 2 * 6 * 7 * 7 * f32, 6 * f32
    U, V, products = 16 * 6 * 5 * f32, 16 * 5 * tiles * f32, 16 * 6 * tiles * f32
    assert [(k.kernel, k.array_bytes) for k in fwd] == [
        ("winograd_filter_a4", w + U),
        ("winograd_input_a4", x + V),
        ("gemm_nn_batched", U + V + products),
        ("winograd_output_a4", products + bias + y),
    ]
    assert traffic(fwd, "transform") == (0.0, w + U + x + V + products + bias + y, 3)  # the emulation times nothing


@pytest.mark.parametrize("split", [2, 3])
def test_the_batched_gemm_splits_each_points_reduction_and_sums_each_alone(emulator, split):
    """Split-K inside the batch: grid y holds the points, z the slices, the partials points x slices
    x M x N, and one splitk_reduce sums each point's slices into its own product; every phase
    against the reference."""
    from tracker.ops.gemm import Tile
    from tracker.ops.launch import blocks

    case = Case("conv", "split", {"x": (2, 24, 6, 6), "w": (40, 24, 3, 3)}, {"stride": 1, "pad": 1})
    emulator.log.clear()
    results = run_case(emulator, case, "winograd", tile=Tile(32, 64, 8, split=split))
    assert all(r.passed for r in results), [(r.phase, r.error) for r in results if not r.passed]
    assert batched_points(emulator, "gemm_nn_batched") == [2 * 16, 16]  # 40 outputs in 32-row tiles: two a point
    slices = [k.grid[2] for k in emulator.log if k.kernel.endswith("_batched")]
    assert slices == [split, split, split]
    reduced = [k.grid[0] for k in emulator.log if k.kernel == "splitk_reduce"]
    assert reduced[0] == blocks(16 * 40 * 18)  # the forward's: all 16 points of 40 channels x 18 tiles, one launch


@pytest.mark.parametrize("m, r", [(2, 3), (2, 5), (4, 3), (4, 5), (3, 2), (5, 2), (3, 4), (5, 4)])
def test_cook_toom_matrices_compute_the_correlation_exactly(m, r):
    at, g, bt = matrices(m, r)
    rng = np.random.default_rng(m * 10 + r)
    for _ in range(5):
        d, f = rng.normal(size=m + r - 1), rng.normal(size=r)
        expected = [sum(d[i + k] * f[k] for k in range(r)) for i in range(m)]
        assert at @ ((g @ f) * (bt @ d)) == pytest.approx(expected, abs=1e-12)
    if (m, r) == (4, 3):  # Lavin & Gray's published A^T for F(4x4, 3x3)
        assert at.tolist() == [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]


@pytest.mark.parametrize(
    "x, w, pad, variant, within",
    [
        ((1, 64, 13, 13), (16, 64, 3, 3), 1, "winograd", 10),  # AlexNet's conv3-5 plane: F(2x2,3x3)
        (
            (1, 32, 27, 27),
            (8, 32, 5, 5),
            2,
            "winograd",
            20,
        ),  # conv2's plane: F(2x2,5x5), larger transforms, larger error
        ((1, 64, 13, 13), (16, 64, 3, 3), 1, "winograd_f4", 30),  # F(4x4,3x3): measured 6-7x F(2x2,3x3)'s
        ((1, 32, 27, 27), (8, 32, 5, 5), 2, "winograd_f4", 30),  # F(4x4,5x5)
    ],
)
def test_its_error_stays_near_the_implicit_gemms_at_a_deep_contraction(emulator, x, w, pad, variant, within):
    """Lavin & Gray measured F(2x2,3x3)'s max error in fp32 at 4e-5, F(4x4,3x3)'s at 1e-3, a direct
    convolution's at 3e-4 (their measure, not ours: ours is relative to the output's norm)."""
    case = Case("conv", "deep", {"x": x, "w": w}, {"stride": 1, "pad": pad})
    winograd = {(r.phase, r.output): r for r in run_case(emulator, case, variant)}
    shared = {(r.phase, r.output): r for r in run_case(emulator, case, "shared")}
    for key in (("fwd", "y"), ("bwd_data", "dx"), ("bwd_weight", "dw")):
        assert winograd[key].tolerance == 10 * shared[key].tolerance == 10 * REDUCTION  # its own bound
        assert winograd[key].passed
        # the weight gradient's 5x5 outputs come from the largest transforms: F(5x5,2x2)'s 1.2e-5
        assert winograd[key].max_error < 2e-5 and winograd[key].error < within * max(shared[key].error, 1e-7), key


def test_the_error_measures():
    error, largest, mean = relative_errors(np.array([1.0, 2.0], dtype=np.float32), np.array([1.0, 1.0]))
    assert (error, largest, mean) == (pytest.approx(1 / np.sqrt(2)), 1.0, 0.5)
    assert relative_errors(np.array([np.nan], dtype=np.float32), np.array([1.0]))[1] == float("inf")


def test_a_record_holds_each_layers_max_and_mean_error(emulator, tmp_path):
    from tracker.gpu.runner import summarize
    from tracker.gpu.verified import write_record

    case = Case("conv", "conv3", {"x": (1, 4, 6, 6), "w": (3, 4, 3, 3)}, {"stride": 1, "pad": 1})
    rows = summarize([("ca", r) for r in run_case(emulator, case, "winograd")])
    path = write_record(rows, {"device_name": "CPU emulation", "driver_version": "-", "cuda_version": "-"}, tmp_path)
    entry = json.loads(path.read_text())["variants"]["conv/fwd/winograd"]
    layer = entry["layers"]["conv3"]["ca"]
    fwd = next(r for r in rows if r["phase"] == "fwd")
    assert (layer["max"], layer["mean"]) == (fwd["max_error"], fwd["mean_error"]) and 0 < layer["max"] < 1e-5


def test_the_benchmark_times_a_variant_only_where_its_own_algorithm_runs():
    """`benchmarks/kernels.py` times the variants that apply at each of AlexNet's layer phases
    (``Op.applying``): on an H200 (tests/data/gpu-2026-11-26f-h200/RESULTS.md) it timed Winograd and
    FFT at conv1's stride 4, where they run the shared variant's implicit GEMM, and named
    "winograd" conv1's fastest."""
    from tracker.nets import build
    from tracker.ops import OPS
    from tracker.ops.selftest import network_cases

    conv = OPS["conv"]
    cases = {case.layer: case for case in network_cases(build("alexnet"), 128) if case.op == "conv"}
    fast = {"winograd", "winograd_f4", "fft"}
    everywhere = set(conv.variants) - fast
    assert set(conv.applying(cases["conv1"], "fwd")) == everywhere
    for layer, phase in (("conv2", "fwd"), ("conv3", "fwd"), ("conv3", "bwd_weight")):
        assert set(conv.applying(cases[layer], phase)) == set(conv.variants)
    assert set(conv.rivals(cases["conv3"], "fwd")) == set(conv.applying(cases["conv3"], "fwd")) - {"fused"}
