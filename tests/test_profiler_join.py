"""The two-pass join: pass 1's launches matched to the profiler's by name and range."""

from __future__ import annotations

import pytest
from profiler_samples import SAMPLE, Logged, read

from tracker.errors import JoinError
from tracker.profilers import ncu_csv
from tracker.profilers.join import join, kernel_base

# --- the two-pass join -------------------------------------------------------------------------


def _pass1(launches, ranges) -> list[Logged]:
    return [
        Logged(invocation=i, kernel_name=kernel_base(launch.kernel), range=r)
        for i, (launch, r) in enumerate(zip(launches, ranges))
    ]


def test_join_matches_names_and_ranges():
    profiled = ncu_csv.parse(SAMPLE)
    ranges = [f"layer{i}/fwd" for i in range(len(profiled))]
    rows = join(_pass1(profiled, ranges), profiled, [f"dom@{r}" for r in ranges])
    assert len(rows) == sum(len(p.metrics) for p in profiled)
    assert {r["name"] for r in rows} == {"cycles_elapsed", "sm_clock_hz"}


def test_join_names_the_first_bad_invocation():
    profiled = ncu_csv.parse(SAMPLE)
    ranges = [f"layer{i}/fwd" for i in range(len(profiled))]
    pass1 = _pass1(profiled, ranges)
    swapped = pass1[:3] + [pass1[3]._replace(kernel_name="relu_fwd")] + pass1[4:]
    with pytest.raises(JoinError, match=r"^invocation 3 \(layer3/fwd, relu_fwd\): pass 2 profiled kernel"):
        join(swapped, profiled, ranges)
    with pytest.raises(JoinError, match=r"invocation 5 .*inside NVTX range 'layer4/fwd'"):
        join(pass1, profiled, ranges[:5] + ["layer4/fwd"] + ranges[6:])
    with pytest.raises(JoinError, match=r"invocation 6 .* is missing from pass 2, which profiled 6 of 8"):
        join(pass1, profiled[:6], ranges[:6])
    with pytest.raises(JoinError, match=r"pass 2 profiled 8 launches, pass 1 logged 7; the first extra one is #7"):
        join(pass1[:7], profiled, ranges)


H100_B1 = "ncu-raw-h100-sm90-ncu2025.3-alexnet-b1.csv"  # tools/gpu_stage.sh 1 on an H100; SOURCES.md


THEN = {"lrn_fwd_window": "lrn_fwd_shared", "lrn_bwd_window": "lrn_bwd_shared"}  # renamed since
ELSEWHERE = ("lrn_fwd_global", "lrn_bwd_global")  # LRN's shared kernels where a window is not 5 wide: not AlexNet's


def _planned_launches(batch_net: str = "alexnet") -> list[Logged]:
    """Pass 1's launch log as our plan made it when the H100 recordings were made: the kernels of
    every step, with its NVTX range. The split-K reduction came later, and launches only
    where a GEMM's reduction is cut, so it is left out, as are softmax's per-position kernels, which
    its `shared` variant launches only with more than one position per image; max-pool's default
    was then `global`, and LRN's `shared` kernels had the names of their staged forebears (THEN)."""
    from tracker.gpu.network import FUSED_INTO, plan
    from tracker.nets import build
    from tracker.ops import OPS

    launches = []
    for step in plan(build(batch_net), {"maxpool": "global"}):
        if step.variant != FUSED_INTO:
            for kernel in OPS.of(step.layer).variants[step.variant].launches[step.phase].kernels:
                if kernel.name in ("splitk_reduce", "softmax_fwd_global", "softmax_xent_bwd_global", *ELSEWHERE):
                    continue
                launches.append(
                    Logged(
                        invocation=len(launches),
                        kernel_name=THEN.get(kernel.name, kernel.name),
                        range=f"{step.layer.name}/{step.phase}",
                    )
                )
    return launches


def test_join_on_a_real_h100_recording_of_our_alexnet():
    """ncu 2025.3 names each launch 'layer/phase/kernel' under --print-nvtx-rename kernel; both
    exports of a real batch-1 run join onto the launches our plan makes, every one checked."""
    profiled = ncu_csv.parse(read(H100_B1))
    named = [p.kernel for p in ncu_csv.parse(read(H100_B1.replace("raw-", "raw-nvtx-")))]
    assert named[0] == "conv1/fwd/conv2d_fwd_implicit" and len(profiled) == 57
    launches = _planned_launches()
    rows = join(launches, profiled, named)
    assert len({r["invocation"] for r in rows}) == 57
    assert {r["name"] for r in rows} >= {"duration_ns", "dram_read_bytes", "l2_hit_rate"}
    with pytest.raises(JoinError, match=r"invocation 1 \(relu1/fwd, relu_fwd_global\): .* 'lrn1/fwd/"):
        join(launches, profiled, [named[0], named[2], *named[2:]])


@pytest.mark.parametrize(
    "printed, base",
    [
        ("void unnamed>::gemm_tiled_kernel<32>(const float *, int)", "gemm_tiled_kernel"),
        ("conv2d_fwd_shared", "conv2d_fwd_shared"),
        ("ij_deriv_kernel(int, int, thrust::complex<double> const*)", "ij_deriv_kernel"),
        ("void flash::kernel<Traits<128, (bool)1>>(Params)", "kernel"),
    ],
)
def test_kernel_base(printed, base):
    assert kernel_base(printed) == base
