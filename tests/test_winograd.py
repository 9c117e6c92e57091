"""conv's winograd variant, F(2x2, 3x3) (kernels/winograd.cu), on the CPU emulation of CUDA:
which layers it runs Winograd on and which it leaves to the implicit GEMM, its error against
the float64 reference beside the implicit GEMM's at a deep contraction, and the error measures
the selftest reports and records."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tracker.ops.registry import Case
from tracker.ops.selftest import _errors, run_case
from tracker.ops.winograd import applies

pytestmark = pytest.mark.slow


def kernels(emulator, case: Case, variant: str) -> tuple[list, list[str]]:
    emulator.log.clear()
    results = run_case(emulator, case, variant)
    return results, [k.kernel for k in emulator.log]


def test_winograd_runs_stride_1_3x3_layers_and_leaves_the_rest_to_the_implicit_gemm(emulator):
    case = Case("conv", "s1", {"x": (2, 5, 7, 7), "w": (6, 5, 3, 3)}, {"stride": 1, "pad": 1})
    results, launched = kernels(emulator, case, "winograd")
    assert all(r.passed for r in results)
    fwd = launched[:launched.index("winograd_output") + 1]
    assert fwd == ["winograd_filter", "winograd_input", *["gemm_nn"] * 16, "winograd_output"]
    assert launched.count("winograd_output") == 2  # forward and data gradient
    assert "conv2d_bwd_weight_implicit" in launched and "conv2d_fwd_implicit" not in launched
    strided = Case("conv", "s2", {"x": (1, 3, 9, 9), "w": (4, 3, 3, 3)}, {"stride": 2, "pad": 1})
    results, launched = kernels(emulator, strided, "winograd")
    assert all(r.passed for r in results) and not any(k.startswith("winograd") for k in launched)
    assert [applies((1, 1, 3, 3), 1, pad) for pad in (0, 1, 2, 3)] == [True, True, True, False]
    assert not applies((1, 1, 5, 5), 1, 2)


def test_its_error_is_of_the_implicit_gemms_order_at_a_deep_contraction(emulator):
    """64 channels in, 13 x 13 (AlexNet's conv3-5 plane): F(2x2,3x3) adds and subtracts before
    and after the products; Lavin & Gray measured 4e-5 max error in fp32."""
    case = Case("conv", "deep", {"x": (1, 64, 13, 13), "w": (16, 64, 3, 3)}, {"stride": 1, "pad": 1})
    winograd = {(r.phase, r.output): r for r in run_case(emulator, case, "winograd")}
    shared = {(r.phase, r.output): r for r in run_case(emulator, case, "shared")}
    for key in (("fwd", "y"), ("bwd_data", "dx")):
        assert winograd[key].passed
        assert winograd[key].max_error < 1e-5 and winograd[key].error < 10 * max(shared[key].error, 1e-7), key


def test_the_error_measures():
    error, largest, mean = _errors(np.array([1.0, 2.0], dtype=np.float32), np.array([1.0, 1.0]))
    assert (error, largest, mean) == (pytest.approx(1 / np.sqrt(2)), 1.0, 0.5)
    assert _errors(np.array([np.nan], dtype=np.float32), np.array([1.0]))[1] == float("inf")


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
