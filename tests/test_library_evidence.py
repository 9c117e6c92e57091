"""The library arm on real recordings: one batch-16 step of AlexNet run by cuDNN and cuBLAS, as
PyTorch's profiler traced it (pass 1's launch log) and as Nsight Compute profiled it (pass 2), on
an H100 (tests/data/gpu-2026-11-25-h100/README.md, where the join failed) and on an H200 after the
fixes (tests/data/gpu-2026-11-26-h200/README.md, where it joined); and a 3-D U-Net's kernel that
ncu and the profiler name differently.

Two defects found there: the join refused the first templated kernel (the two demanglers write
``<128, 2, ...>`` and ``<(int)128, (int)2, ...>``), and a layer phase's repeat was counted per
range occurrence while every backward node reopens its layer phase's range (LRN's backward came
out as six repeats of one step).
"""

from __future__ import annotations

import copy
import gzip
import json
from collections import Counter, defaultdict
from dataclasses import replace
from itertools import groupby
from pathlib import Path
from types import SimpleNamespace

import pytest

from tracker.errors import JoinError
from tracker.kernel_names import comparable, demangled, kernel_base
from tracker.library import kineto
from tracker.nets import build
from tracker.profilers import ncu_csv
from tracker.profilers.join import join
from tracker.profilers.ncu_collector import nvtx_ranges

DATA = Path(__file__).parent / "data" / "gpu-2026-11-25-h100"
RECORDINGS = {  # GPU: (folder, the trace, ncu's raw page, the same with NVTX names)
    "h100": (
        DATA,
        "2-library-alexnet-b16-h100-kineto.json.gz",
        "2-library-b16-h100-ncu-raw.csv.gz",
        "2-library-b16-h100-ncu-raw-nvtx.csv.gz",
    ),
    "h200": (
        DATA.parent / "gpu-2026-11-26-h200",
        "library-alexnet-b16-h200-kineto.json.gz",
        "library-b16-h200-ncu-raw.csv.gz",
        "library-b16-h200-ncu-raw-nvtx.csv.gz",
    ),
}
STEPS = 141  # kernels in the traced step, launches ncu profiled
OUTSIDE = 4  # of them outside every range: lrn1's and lrn2's gradient accumulations, two each (their callers')


def _ncu(path: Path) -> list[ncu_csv.ProfiledLaunch]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return ncu_csv.parse(f.read(), path.name)


@pytest.fixture(scope="module", params=sorted(RECORDINGS))
def gpu(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def trace(gpu) -> dict:
    folder, name, _, _ = RECORDINGS[gpu]
    return kineto.load(folder / name)


@pytest.fixture(scope="module")
def pages(gpu) -> tuple[list, list]:
    """ncu's raw page (kernel names, metrics, NVTX stack) and the same under --print-nvtx-rename."""
    folder, _, plain, renamed = RECORDINGS[gpu]
    return _ncu(folder / plain), _ncu(folder / renamed)


def test_ncu_and_pytorchs_profiler_name_every_kernel_alike_in_comparable_form(trace, pages):
    """Every kernel of the step as both recorded it (the same order: two runs of one workload),
    and no two different kernels made alike."""
    traced = kineto.kernels(trace)
    named = [launch.kernel for launch in pages[1]]
    assert len(traced) == len(named) == STEPS
    for k, printed in zip(traced, named):
        prefix = f"{k.annotation.name}/" if k.annotation else ""
        assert printed.startswith(prefix)
        assert comparable(printed.removeprefix(prefix)) == comparable(k.name), k.name
    distinct = {k.name for k in traced}
    assert len(distinct) == 54 and len({comparable(name) for name in distinct}) == 54
    first = traced[1].name  # the one the join refused
    assert first.startswith("void at::native::elementwise_kernel<128, 2, ")
    assert named[1].startswith("conv1/fwd/void at::native::elementwise_kernel<(int)128, (int)2, ")


def test_both_profilers_names_give_one_bare_function_name(trace, pages):
    """The bare name (``kernel_base``: what the join matches pass 2's plain page on, and the
    report shows) of every kernel, from the trace and from ncu's raw page: the same, never empty
    (the trace writes a scope '(anonymous namespace)', which is no parameter list)."""
    traced = [kernel_base(k.name) for k in kineto.kernels(trace)]
    assert traced == [kernel_base(p.kernel) for p in pages[0]] and all(traced)
    assert "avg_pool3d_cuda_update_output" in traced and "softmax_warp_forward" in traced


def test_a_unet3d_kernel_is_alike_in_comparable_form():
    """The refusal of the 3-D U-Net's join quotes the kernel as both name it."""
    last = (DATA / "9-torch-unet3d-ncu-tail.log").read_text().splitlines()[-1]
    ours, _, theirs = last.partition("): pass 2 saw it inside NVTX range '")
    traced = ours.split(", ", 1)[1]
    printed = theirs.removesuffix("'").removeprefix("down.0.b1/fwd/")
    assert "std::array<char*, 2ul>" in traced and "std::array<char *, (unsigned long)2>" in printed
    assert comparable(printed) == comparable(traced)


def test_cublass_gemv_kernel_is_alike_in_comparable_form():
    """The library arm under ncu at batch 1 (an H200's GPU suite, tests/data/gpu-2026-11-26c-h200):
    fc6's forward runs cuBLAS's gemv, whose name ncu writes with the template's own names in the
    return type, 0/1 for false/true, and a namespace fewer than the profiler's. The refusal quotes
    both; no two kernels of the batch-16 recordings become alike for it (the test above)."""
    refusal = next(
        line
        for line in (DATA.parent / "gpu-2026-11-26c-h200" / "suite.log").read_text().splitlines()
        if "pass 2 profiled kernel" in line
    )
    traced = refusal.split("(fc6/fwd, ", 1)[1].split("): pass 2 profiled kernel '")[0]
    printed = refusal.split("pass 2 profiled kernel '", 1)[1].removesuffix("' there")
    assert traced.startswith("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float")
    assert printed.startswith("std::enable_if<!T7, void>::type internal::kernel<int, int, float")
    assert comparable(printed) == comparable(traced)
    assert comparable(traced).startswith("kernel<int,int,float,float,float,float,0,1,1,0,7,0,cublasGemvParamsEx<")
    # the join's two checks: the bare name on the plain page, the full one after the NVTX range
    logged = SimpleNamespace(invocation=32, kernel_name=traced, range="fc6/fwd", in_range=True)
    got = ncu_csv.ProfiledLaunch(id=31, kernel=printed, metrics={"duration_ns": 2048.0})
    assert join([logged], [got], [f"fc6/fwd/{printed}"]) == [dict(invocation=32, name="duration_ns", value=2048.0)]


def test_a_mangled_kernel_name_reads_as_pytorchs_profiler_wrote_it(trace):
    """The driver, and so CUPTI's range profiler, names a library kernel by its mangled symbol. The
    symbol g++ 12 gives lrn1's fill kernel (the Itanium ABI, nvcc's host side's too; made in
    /tmp from a declaration of that template) demangles to the name the H100's trace holds, so the
    join reads both alike. A name that is not a symbol stays as it is."""
    symbol = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
    traced = next(k.name for k in kineto.kernels(trace) if "FillFunctor<float>" in k.name)
    assert demangled(symbol) == traced
    assert (kernel_base(symbol), comparable(symbol)) == (kernel_base(traced), comparable(traced))
    gemv = "_ZN8internal5gemvx6kernelIiLb0EEENSt9enable_ifIXntT0_EvE4typeET_"  # the H200's refused kernel, in small
    assert demangled(gemv) == "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, false>(int)"
    assert [demangled(n) for n in ("conv2d_fwd_implicit", "_Znot a symbol", "")] == [
        "conv2d_fwd_implicit",
        "_Znot a symbol",
        "",
    ]


def test_every_launch_of_the_recorded_step_joins(trace, pages):
    """Pass 1 from the profiler's trace, pass 2 from ncu's pages, joined as the ncu collector
    joins them: every one of the 141 launches gets its counters, the four that both saw outside
    every range (the autograd engine's gradient sums, between two nodes) included: pass 1 gives
    them to the layer phase whose call ran them, LRN's backward, and ncu's pass 2 joins them there."""
    launches, outside = kineto.launch_log(kineto.kernels(trace), build("alexnet"), "torch")
    profiled, named = pages
    ranges = nvtx_ranges(profiled, named)
    unranged = [k for k in launches if not k.in_range]
    assert len(launches) == STEPS and not outside and len(unranged) == ranges.count(None) == OUTSIDE
    assert Counter(k.range for k in unranged) == {"lrn1/bwd_data": 2, "lrn2/bwd_data": 2}
    assert [comparable(k.kernel_name) for k in unranged] == [
        comparable(n.kernel) for n, r in zip(named, ranges) if r is None
    ]
    rows = join(launches, profiled, ranges)
    joined = Counter(row["invocation"] for row in rows)
    assert sorted(joined) == [k.invocation for k in launches]
    assert {row["name"] for row in rows} >= {"duration_ns", "dram_read_bytes", "l2_hit_rate"}


def test_the_recorded_steps_fills_are_timed_with_their_layer_phases_and_left_to_no_profiler(trace, pages):
    """The trace logs four memsets beside the step's 141 kernels (cuBLAS zeroing a workspace in
    fc6-8's forward, cuDNN in conv1's weight gradient): pass 1 logs each with its layer phase, timed,
    with no grid; pass 2's launches (``counted``) are the kernels alone, as ncu profiled them, and
    every one of them joins."""
    from tracker.gpu.workload import Workload
    from tracker.kernel_names import is_transfer
    from tracker.profilers import counted

    launches, outside = kineto.launch_log(kineto.device_work(trace), build("alexnet"), "torch")
    fills = [k for k in launches if is_transfer(k.kernel_name)]
    assert len(launches) == STEPS + 4 and not outside
    assert [(k.range, k.kernel_name, k.role, k.grid, k.block) for k in fills] == [
        (where, "Memset (Device)", "fill", (0, 0, 0), (0, 0, 0))
        for where in ("fc6/fwd", "fc7/fwd", "fc8/fwd", "conv1/bwd_weight")
    ]
    assert all(0 < k.time_ms < 0.002 for k in fills)
    _, kernels = counted(Workload.of(build("alexnet"), 16, repeat=1, implementation="torch"), launches, 1)
    assert [k.kernel_name for k in kernels] == [k.name for k in kineto.kernels(trace)]
    profiled, named = pages
    rows = join(kernels, profiled, nvtx_ranges(profiled, named))
    assert sorted({row["invocation"] for row in rows}) == [k.invocation for k in kernels]


def test_the_join_holds_each_launch_outside_every_range_to_pass_1s(trace, pages):
    """A launch pass 1 saw outside every range must be outside every range in pass 2 too, and the
    reverse: one flag moved, either way, fails the join at that launch."""
    launches, _ = kineto.launch_log(kineto.kernels(trace), build("alexnet"), "torch")
    profiled, named = pages
    ranges = nvtx_ranges(profiled, named)
    first = next(k for k in launches if not k.in_range)
    ranged = [replace(k, in_range=True) if k is first else k for k in launches]
    assert first.range == "lrn2/bwd_data"  # the backward runs lrn2's first
    with pytest.raises(
        JoinError,
        match=rf"^invocation {first.invocation} \(lrn2/bwd_data, .*: pass 2 saw it inside "
        r"NVTX range 'relu2/bwd_data/",
    ):
        join(ranged, profiled, ranges)  # ncu's unranged launch is left out, and the next one is relu2's
    inside = launches[first.invocation - 1]
    unranged = [replace(k, in_range=False) if k is inside else k for k in launches]
    with pytest.raises(
        JoinError,
        match=rf"^invocation {inside.invocation} .*: pass 1 saw it outside every range, "
        r"pass 2 inside 'lrn2/bwd_data",
    ):
        join(unranged, profiled, ranges)


def test_the_cupti_collector_joins_the_library_arms_ranges_onto_every_launch(trace):
    """`--impl torch --backend cupti` with its child stood in for: CUPTI's auto range
    gives one range per launch of each replayed layer phase, the engine's gradient sums included
    (they run inside the phase's call), numbered in launch order ('0', '1', ...: no kernel name).
    Every launch of the recorded step gets its counters, and the child is asked for room for the
    longest layer phase's ranges (LRN's backward: 16)."""
    from tracker.gpu.workload import Workload
    from tracker.profilers.cupti_collector import CuptiCollector

    launches, _ = kineto.launch_log(kineto.kernels(trace), build("alexnet"), "torch")
    phases = [
        (phase, [(str(i), {"smsp__inst_executed.sum": 32.0}) for i, _ in enumerate(group)])
        for (phase, _), group in groupby(launches, key=lambda k: (k.range, k.repeat))
    ]
    asked = []

    class Child:
        """The library arm as pass 2's target, its CUPTI child stood in."""

        workload = Workload.of(build("alexnet"), 16, repeat=1, implementation="torch")

        def ranges(self, metrics, most, echo):
            asked.append((self.workload.implementation, most, len(metrics)))
            return phases, [], {"replay": "user"}

    workload = Child()
    collector = CuptiCollector("libcupti 13.0 (a stand-in)")
    counters = collector.collect(workload, launches, 9.0, lambda line: None)
    assert [row["invocation"] for row in counters.rows] == [k.invocation for k in launches]
    assert asked[0][:2] == ("torch", 16) and asked[0][2] > 50
    del phases[-1][1][-1]
    with pytest.raises(
        JoinError, match=r"^conv1/bwd_weight \(iteration 1\): pass 1 launched 2 kernels, CUPTI counted 1 ranges$"
    ):
        collector.collect(workload, launches, 9.0, lambda line: None)


def test_the_join_still_tells_two_kernels_of_one_base_name_apart(trace, pages):
    """lrn1's forward launches a multiply then a fill, both ``vectorized_elementwise_kernel``:
    swapped in pass 1, the bare names agree and the full names do not."""
    launches, _ = kineto.launch_log(kineto.kernels(trace), build("alexnet"), "torch")
    mul, fill = launches[3], launches[4]
    assert (mul.range, fill.range) == ("lrn1/fwd", "lrn1/fwd") and "MulFunctor" in mul.kernel_name
    swapped = [*launches[:3], replace(mul, kernel_name=fill.kernel_name), *launches[4:]]
    profiled, named = pages
    with pytest.raises(
        JoinError,
        match=r"^invocation 3 \(lrn1/fwd, .*FillFunctor.*\): pass 2 saw it inside "
        r"NVTX range 'lrn1/fwd/.*MulFunctor",
    ):
        join(swapped, profiled, nvtx_ranges(profiled, named))


def test_every_kernel_of_the_recorded_step_is_in_its_layer_phases_one_repeat(trace):
    """The trace holds one step: every launch is repeat 0, each of lrn1's and lrn2's backward
    kernels (their nodes reopen the range ten times on the engine's thread, and the engine sums
    gradients twice between them) included, and the step's time is the sum over its layer phases."""
    launches, _ = kineto.launch_log(kineto.kernels(trace), build("alexnet"), "torch")
    assert {k.repeat for k in launches} == {0}
    per_phase = Counter(k.range for k in launches)
    assert per_phase["lrn1/bwd_data"] == per_phase["lrn2/bwd_data"] == 16
    spans = Counter(e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation")
    assert spans["lrn1/bwd_data"] == spans["lrn2/bwd_data"] == 11  # one the caller's, ten the nodes'
    algorithms = {k.algorithm for k in launches if k.range == "conv2/bwd_weight"}
    assert algorithms == {"winograd_nonfused"}  # one algorithm for all of a phase's kernels


def test_a_second_step_is_repeat_1(trace):
    """The recorded step twice (every event again, later by the step's length and with new
    correlation ids): the second step's launches are repeat 1, the same kernels under the same
    layer phases."""
    launches, _ = kineto.launch_log(kineto.kernels(_twice(trace)), build("alexnet"), "torch")
    half = len(launches) // 2
    assert half == STEPS
    assert [k.repeat for k in launches] == [0] * half + [1] * half
    by_repeat: defaultdict[int, list] = defaultdict(list)
    for k in launches:
        by_repeat[k.repeat].append((k.range, k.kernel_name))
    assert by_repeat[0] == by_repeat[1]


def _twice(trace: dict) -> dict:
    events = [e for e in trace["traceEvents"] if "ts" in e and e.get("ph") == "X"]
    length = max(float(e["ts"]) + float(e.get("dur", 0)) for e in events) - min(float(e["ts"]) for e in events)
    last = max(e["args"]["correlation"] for e in events if "correlation" in e.get("args", {}))
    again = []
    for event in map(copy.deepcopy, events):
        event["ts"] = float(event["ts"]) + length + 1000
        if "correlation" in event.get("args", {}):
            event["args"]["correlation"] += last + 1
        again.append(event)
    return {**trace, "traceEvents": trace["traceEvents"] + again}


@pytest.mark.slow  # draws every figure of the report
def test_the_h200s_joined_library_run_is_shown_and_reported_with_its_counters(runner, tmp_path):
    """The batch-16 library run that joined under ncu on the H200, as stored there: `tracker show`
    names cuDNN's algorithm per conv phase, and the report draws every counter section (the GPU
    suite's report test of a library ncu run never finished on that machine)."""
    from report_check import check_report

    from tracker.cli import cli

    db = tmp_path / "library-b16-ncu-h200.db"
    with gzip.open(RECORDINGS["h200"][0] / "library-b16-ncu-h200.db.gz") as f:
        db.write_bytes(f.read())
    shown = runner.invoke(cli, ["show", "1", "--db", str(db), "--format", "json"])
    assert shown.exit_code == 0, shown.output
    rows = json.loads(shown.stdout)["layers"]
    conv = {(r["layer"], r["phase"]): r["algorithm"] for r in rows if r["layer"].startswith("conv")}
    assert conv[("conv3", "fwd")] == conv[("conv2", "bwd_data")] == "fft"
    assert {conv[(f"conv{i}", "bwd_weight")] for i in (2, 3, 4, 5)} == {"winograd_nonfused"}
    check_report(runner, str(db), "1", tmp_path / "report", counters=True)
