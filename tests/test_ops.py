"""The op registry (tracker/ops): a variant added from outside the op's module reaches every
consumer (--variant, the plan, the executor, the selftest, the compile check, the experiments)
with no other edit; sizes the CUDA reads come only from the registry; and the registry refuses
what it cannot run."""

from __future__ import annotations

import re

import pytest
from step_check import step_errors

from tracker.errors import TrackerError, UnknownName
from tracker.gpu.kernels import KERNEL_DIR, compile_options, sources
from tracker.ops import OPS, defines
from tracker.ops.launch import Arrays, Backend, blocks
from tracker.ops.registry import launch
from tracker.ops.selftest import run_case, small_cases


def _fwd_narrow(b: Backend, a: Arrays) -> None:
    """relu_fwd_global on 64-thread blocks: a launch geometry no registered variant uses."""
    b.launch("relu.cu", "relu_fwd_global", (blocks(a.x.size // 4 + 1, 64),), (64,), (a.x, a.y, a.x.size))


def _bwd_narrow(b: Backend, a: Arrays) -> None:
    b.launch("relu.cu", "relu_bwd_global", (blocks(a.dy.size // 4 + 1, 64),), (64,), (a.dy, a.y, a.dx, a.dy.size))


@pytest.fixture
def toy(monkeypatch):
    """A 'narrow' ReLU variant, registered from here; the registry is restored afterwards."""
    relu = OPS["relu"]
    monkeypatch.setattr(relu, "variants", dict(relu.variants))
    return relu.add(
        "narrow",
        fwd=launch(_fwd_narrow, "relu.cu:relu_fwd_global"),
        bwd_data=launch(_bwd_narrow, "relu.cu:relu_bwd_global"),
    )


def test_a_variant_added_from_outside_reaches_every_consumer(toy, emulator):
    from samples import small_net

    from tracker.experiment import arms
    from tracker.gpu.network import PlanRunner, resolve

    assert OPS.parse_variants("relu=narrow") == {"relu": "narrow"} == OPS.parse_variants("narrow")
    assert "narrow" in {arm.label for arm in arms("variants", 8)}
    (case,) = [c for c in small_cases() if c.op == "relu"]
    results = run_case(emulator, case, "narrow", seed=3)
    assert [(r.phase, r.passed) for r in results] == [("fwd", True), ("bwd_data", True)]

    net = small_net()
    assert {v for name, v in resolve(net, {"relu": "narrow"}).items() if name.startswith("relu")} == {"narrow"}
    emulator.log.clear()
    run = PlanRunner(emulator, net, batch=2, chosen={"relu": "narrow"}, seed=5)
    run.iteration()
    relu_blocks = {r.block for r in emulator.log if r.kernel.startswith("relu_")}
    assert relu_blocks == {(64, 1, 1)}  # the toy's geometry ran, not the registered variant's
    loss, expected, errors = step_errors(run)
    assert loss == pytest.approx(expected, rel=1e-5)
    assert errors["conv1"][0] < 1e-4


@pytest.mark.slow  # compiles kernels with NVRTC
def test_the_compile_check_and_tracker_kernels_list_an_added_variant(toy):
    from tracker.gpu.compile import variant_rows

    rows = [r for r in variant_rows("sm_90", ("ca",)) if r["variant"] == "narrow"]
    assert [(r["op"], r["phase"], r["kernels"], r["verified_on"]) for r in rows] == [
        ("relu", "fwd", ["relu_fwd_global"], None),
        ("relu", "bwd_data", ["relu_bwd_global"], None),
    ]


def test_cuda_sizes_come_from_the_registry_alone():
    """Every -D size is written in Python once and reaches NVRTC (and the emulator's g++) as an
    option; no kernel source or header defines it, so the two cannot disagree."""
    assert defines() == {
        "TILE_M": 128,
        "TILE_N": 128,
        "TILE_K": 8,
        "THREAD_M": 8,
        "THREAD_N": 8,
        "GEMM_THREADS": 256,
        "STAGES": 2,
        "WARP_ROWS": 4,
        "TILE_PAD": 4,
        "MIN_CTAS": 2,
        "RELU_MASK": 0,
        "CONSTANT_FLOATS": 16384,
        "MAX_TAPS_2D": 15,
        "MAX_TAPS_3D": 10,
        "FFT_TILES_N2": 256,
        "FFT_TILES_N4": 128,
        "FFT_TILES_N8": 64,
        "FFT_TILES_N16": 32,
        "FFT_TILES_N32": 32,
        "LRN_WINDOW": 5,
    }
    options = compile_options("ca")
    assert all(f"-D{name}={value}" in options for name, value in defines().items())
    for path in [KERNEL_DIR / s for s in sources()] + [KERNEL_DIR / "common.cuh"]:
        text = path.read_text()
        assert not re.search(rf"#define\s+({'|'.join(defines())})\b", text), path.name


def test_the_registry_refuses_what_it_cannot_run():
    relu = OPS["relu"]
    with pytest.raises(TrackerError, match="relu variant 'half' must launch fwd, bwd_data; got fwd"):
        relu.add("half", fwd=launch(_fwd_narrow, "relu.cu:relu_fwd_global"))
    with pytest.raises(TrackerError, match="relu already has a variant 'global'"):
        relu.add(
            "global",
            fwd=launch(_fwd_narrow, "relu.cu:relu_fwd_global"),
            bwd_data=launch(_bwd_narrow, "relu.cu:relu_bwd_global"),
        )
    assert list(relu.variants) == ["global"]
    with pytest.raises(UnknownName, match="unknown op 'pool'"):
        OPS.parse_variants("pool=shared")
    with pytest.raises(UnknownName, match=r"unknown variant 'turbo'"):
        OPS.parse_variants("turbo")


def test_max_pool_bands_fit_shared_memory_and_fill_the_gpu():
    """AlexNet's pool1 backward at batch 128: 12,288 planes, each one band (its 55 input rows: the
    27 x 27 windows' gradients and saved maxima, 5,832 bytes); at batch 1 its 96 planes are cut
    into 11 bands of 5 rows, so that about WAVE blocks run. A band no block can hold is refused."""
    from tracker.ops.maxpool import band_rows, bwd_band_bytes

    def pool1(rows: int) -> int:
        return bwd_band_bytes(rows, 3, 2, 27, 27)

    assert pool1(55) == 5_832 and band_rows(55, 128 * 96, pool1) == 55
    assert pool1(5) == 2 * 4 * 4 * 27  # 5 rows meet at most 4 rows of windows (rows 10-14: 4-7)
    assert band_rows(55, 96, pool1) == 5  # 11 bands: 96 x 11 blocks, just past WAVE
    assert band_rows(4096, 128, lambda rows: rows * 4 * 4096) == 1  # 16 KiB a row: a row a band
    with pytest.raises(TrackerError, match="needs 65536 bytes of shared memory, over 49152; use the global variant"):
        band_rows(10, 1024, lambda rows: 65536 * rows)


def test_every_small_case_has_a_name_of_its_own():
    """Results are keyed by (case, phase, output): two cases of one name would hide one's results."""
    from collections import Counter

    from tracker.ops.selftest import small_cases

    named = Counter(case.layer for case in small_cases())
    assert [name for name, n in named.items() if n > 1] == []
