"""The GPU suite: every command that needs a GPU, run at small sizes on this machine's GPU, each
asserting what it stored or wrote. Marked `gpu`: skipped without a CUDA device (conftest.py);
`tools/gpu_stage.sh suite` runs it on a lent GPU. Sized to finish within 8 minutes on an H100.

CI has no GPU, so a GPU path this suite does not run first runs in front of a person: on
2026-11-25 every path added since the previous GPU session broke at first contact
(../shared/gpu-2026-11-25-h100/README.md). tests/test_gpu_coverage.py (no GPU) fails when a
command, backend, implementation, experiment kind or GPU benchmark appears that this file never
names.

Commands that touch the GPU run as `python -m tracker ...` in a child process, as a user runs
them: a crash in CUDA, CuPy or PyTorch (a double free at exit was seen) then fails that test
alone, and each starts on a fresh CUDA context. Commands that only read the store (report, show,
compare, export, runs, experiments) run in this process through click's runner. Each profile runs
once in a pytest run, in a module-scoped fixture (``once``: whichever xdist worker asks first),
and its tests read the store it wrote. Tests that read the performance counters are marked
``counters``: tools/gpu_stage.sh runs them one at a time, after the rest on several workers, and
fills CuPy's kernel cache before either (tools/gpu_warm.py). Times in comments are an H200's."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from report_check import check_report
from suite_plugin import once, shared_folder

from tracker.cli import cli
from tracker.nets import NETWORKS, build
from tracker.ops.selftest import network_cases

pytestmark = pytest.mark.gpu
# A test that profiles under ncu, CUPTI or nvprof: two counter collections on one GPU at once fail
# (a driver resource is taken) or count each other's kernels, so tools/gpu_stage.sh runs these one
# at a time, after the rest in parallel (tests/test_gpu_coverage.py checks that every one is marked).
counters = pytest.mark.counters

ROOT = Path(__file__).resolve().parent.parent
USER_MODEL = "torch_models:residual_cnn"  # tests/torch_models.py: 8 layers, conv, batchnorm, one ReLU called 3 times
ENV = {
    **os.environ,
    "MPLBACKEND": "Agg",
    "PYTHONUNBUFFERED": "1",  # tests/ on the path: USER_MODEL imports
    "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH")) if p),
}


def tracker(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m tracker ARGS` in a child process; the test fails with its output's end unless it exits 0."""
    return child([sys.executable, "-m", "tracker", *args], timeout)


def child(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, check=False, capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=timeout)
    if done.returncode != 0:
        # written as the test ends, whatever cuts the suite later (tests/suite_plugin.py)
        pytest.fail(f"{' '.join(argv[1:])} exited {done.returncode}:\n{(done.stdout + done.stderr)[-4000:]}")
    return done


def profiled(db: str, *args: str, timeout: float = 300) -> int:
    """`tracker profile ARGS` into ``db``; the id of the run it stored."""
    return json.loads(tracker("profile", *args, "--db", db, "--format", "json", timeout=timeout).stdout)[0]["run_id"]


def needs_torch() -> None:
    """The library arm needs PyTorch; found without importing it here (PyTorch and CuPy in one
    process ended in a double free at exit, 2026-11-25)."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("PyTorch is not installed: the library arm (--impl torch, --torch) needs it")


# What a stored run must hold -------------------------------------------------------------------


def planned(store, run: dict) -> dict[tuple[str, str], str]:
    """(layer, phase) -> kind of every layer phase the run should launch: each predicted one, less
    the layers our fused variants fold into the one before, and PyTorch's concatenation backward,
    which hands out slices of the joined gradient (views: the unet2d and unet3d runs' only
    failures on an H200, 2026-11-26). These launch nothing."""
    from tracker.gpu.network import FUSED_INTO, resolve
    from tracker.store import layer_rows

    rows = layer_rows(store, run["id"])
    gone: set[tuple[str, str]] = set()
    if run["implementation"] == "ours":
        variants = resolve(build(run["network"], **run["network_options"]), run["variants"])
        gone = {(r["layer"], r["phase"]) for r in rows if variants.get(r["layer"]) == FUSED_INTO}
    elif run["network"] in NETWORKS:  # our network in PyTorch; a user's model keeps every call's launches
        gone = {(r["layer"], "bwd_data") for r in rows if r["kind"] == "concat"}
    return {(r["layer"], r["phase"]): r["kind"] for r in rows if (r["layer"], r["phase"]) not in gone}


def check_launches(store, run_id: int, backend: str) -> dict:
    """The run is complete on ``backend`` and every planned layer phase launched in each measured
    iteration, and nothing else did; every launch timed, in invocation order. The run's row."""
    from tracker.store import find_run, launch_rows, layer_rows, run_dict

    run = run_dict(find_run(store, run_id))
    assert (run["status"], run["backend"], run["error"]) == ("complete", backend, None)
    ids = {r["layer"]: r["layer_id"] for r in layer_rows(store, run_id)}
    launches = launch_rows(store, run_id)
    seen = {(k["layer_id"], k["phase"], k["repeat"]) for k in launches}
    assert seen == {(ids[layer], phase, r) for layer, phase in planned(store, run) for r in range(run["repeat"])}
    assert all(k["time_ms"] is not None and k["time_ms"] > 0 for k in launches)
    assert [k["invocation"] for k in launches] == list(range(len(launches)))
    return run


def check_counters(store, run_id: int, expected: set[str]) -> None:
    """Pass 2 joined every kernel of pass 1 (a library's copies and fills, which no kernel profiler
    counts, hold none): each holds exactly the ``expected`` counters."""
    from tracker.kernel_names import is_transfer
    from tracker.store import launch_rows, metric_rows

    held: dict[int, set[str]] = {}
    values: dict[tuple[int, str], float | None] = {}
    for row in metric_rows(store, run_id):
        held.setdefault(row["invocation"], set()).add(row["name"])
        values[(row["invocation"], row["name"])] = row["value"]
    invocations = [k["invocation"] for k in launch_rows(store, run_id) if not is_transfer(k["kernel_name"])]
    assert sorted(held) == invocations
    assert all(names == expected for names in held.values()), {
        i: expected ^ n for i, n in held.items() if n != expected
    }
    if "duration_ns" in expected:  # ncu's own time of each launch
        assert all((values[(i, "duration_ns")] or 0) > 0 for i in invocations)


# Selftest: every variant against the reference ------------------------------------------------


def test_selftest_passes_every_variant():  # 58 s on an H200 with an empty kernel cache, compiling as it goes
    """Every variant at AlexNet's shapes, L1 cached; each one's L1-bypassing build is checked on the
    small cases (the next test: 55 s on an H200 compiling the cg builds as it went, 8 s with them
    cached), where ca and cg both took 67 s here on an H200 (2026-11-26)."""
    from tracker.gpu.runner import selftest, summarize
    from tracker.ops import OPS

    cases = tuple(network_cases(build("alexnet"), 2))
    results, _ = selftest(cases, ("ca",), lambda line: None)
    rows = summarize(results)
    assert {(r["l1"], r["layer"], r["variant"]) for r in rows} == {
        ("ca", case.layer, variant) for case in cases for variant in OPS[case.op].variants
    }
    failed = [r for r in rows if not r["passed"]]
    assert not failed, failed


def test_split_k_sizes_its_grids_from_the_gpus_own_occupancy():
    """CupyBackend.slots (the driver's occupancy calculator on the loaded GEMM build) against the
    calculator the wave model reads the build's registers and shared memory with (tests/test_waves.py)."""
    import cupy as cp

    from tracker.gpu.compile import SM_LIMITS, Resources, resident_blocks
    from tracker.gpu.cupy_backend import CupyBackend
    from tracker.ops.gemm import DEFAULT

    device = cp.cuda.Device()
    arch = "sm_{}{}".format(*device.compute_capability)
    if arch not in SM_LIMITS:
        pytest.skip(f"the calculator knows {', '.join(SM_LIMITS)}, not {arch}")
    backend = CupyBackend("ca", timed=False)
    slots = backend.slots("gemm.cu", "gemm_nn", DEFAULT.threads)
    loaded = backend.module("gemm.cu").get_function("gemm_nn")
    build = Resources(loaded.num_regs, loaded.shared_size_bytes, 0, 0, 0, block_threads=DEFAULT.threads)
    assert slots == device.attributes["MultiProcessorCount"] * resident_blocks(build, arch)


def test_selftest_of_the_small_cases_through_the_cli():
    from tracker.ops import OPS
    from tracker.ops.selftest import small_cases

    done = tracker("selftest", "--shapes", "small", "--l1", "both", "--format", "json")
    rows = json.loads(done.stdout)
    assert {(r["l1"], r["op"], r["variant"]) for r in rows} == {
        (l1, case.op, variant) for l1 in ("ca", "cg") for case in small_cases() for variant in OPS[case.op].variants
    }
    assert all(r["passed"] and r["error"] is not None for r in rows), [r for r in rows if not r["passed"]]
    assert f"{len(rows)} passed, 0 failed on " in done.stderr


def test_selftest_of_pytorchs_layer_phases_on_the_gpu():  # about 15 s, most of it the float64 reference
    """Every AlexNet layer phase as PyTorch runs it (cuDNN, cuBLAS; fp32, TF32 off), under
    our selftest's checks and bounds. Its whole step was 2.2e-3 from the reference on an H100;
    a failure here names the layer phase and output that lose the digits."""
    from tracker.ops import OPS

    needs_torch()
    done = tracker("selftest", "--impl", "torch", "--batch", "2", "--format", "json")
    rows = json.loads(done.stdout)
    named = {"fwd": ("y",), "bwd_data": ("dx",), "bwd_weight": ("dw", "db")}
    softmax = {"fwd": ("p",), "bwd_data": ("dx", "loss")}
    cases = tuple(network_cases(build("alexnet"), 2))
    assert {(r["layer"], r["phase"], r["output"]) for r in rows} == {
        (case.layer, phase, output)
        for case in cases
        for phase in OPS[case.op].phases
        for output in (softmax if case.op == "softmax" else named)[phase]
    }
    assert all(r["variant"] == "torch" and r["error"] is not None for r in rows), rows
    assert all(r["passed"] for r in rows), [r for r in rows if not r["passed"]]
    assert f"{len(rows)} passed, 0 failed on NVIDIA " in done.stderr  # PyTorch ran it on the GPU, not the CPU


# Profiles: ours, the library arm and a user's model, on events and under ncu ------------------


@pytest.fixture(scope="module")
def profiles(tmp_path_factory) -> str:
    """The one database every profile fixture below writes into (so that compare can pair them),
    each profile made once in a pytest run, whichever xdist worker asks first (``once``)."""
    return str(shared_folder(tmp_path_factory) / "trace.db")


@pytest.fixture(scope="module")
def ncu() -> str:
    from tracker.profilers.ncu import find

    path = find()
    if path is None:
        pytest.skip(
            "Nsight Compute (ncu) is not on PATH, in $TRACKER_NCU or under /usr/local/cuda: "
            "the ncu backend cannot run here"
        )
    return path


@pytest.fixture(scope="module")
def ncu_counters(ncu) -> set[str]:
    """The catalog names each launch of an ncu run holds on this GPU: the metrics of its compute
    capability that this ncu lists, and the replay passes ncu adds."""
    from tracker.gpu.detect import compute_capability
    from tracker.profilers.ncu import SOURCES, available_metrics

    known = available_metrics(ncu)
    names = {SOURCES.by_name[m].metric for m in SOURCES.requested(compute_capability()) if m.split(".", 1)[0] in known}
    assert {"duration_ns", "dram_read_bytes", "l2_hit_rate", "stall_long_scoreboard", "ffma"} <= names
    return names | {"replay_passes"}


@pytest.fixture(scope="module")
def ours_events(profiles, tmp_path_factory) -> int:
    return once(
        tmp_path_factory,
        "ours_events",
        lambda: profiled(profiles, "alexnet", "--batch", "2", "--backend", "events", "--repeat", "2"),
    )


@pytest.fixture(scope="module")
def ours_ncu(profiles, ncu, tmp_path_factory) -> int:  # 74.5 s on an H200: 18 replay passes of each of ~70 launches
    return once(
        tmp_path_factory,
        "ours_ncu",
        lambda: profiled(profiles, "alexnet", "--batch", "1", "--backend", "ncu", "--repeat", "1"),
    )


@pytest.fixture(scope="module")
def ours_cupti(profiles, tmp_path_factory) -> int:  # every layer phase replayed per pass in this process
    return once(
        tmp_path_factory,
        "ours_cupti",
        lambda: profiled(profiles, "alexnet", "--batch", "1", "--backend", "cupti", "--repeat", "1"),
    )


@pytest.fixture(scope="module")
def torch_events(profiles, tmp_path_factory) -> int:
    needs_torch()
    return once(
        tmp_path_factory,
        "torch_events",
        lambda: profiled(
            profiles, "alexnet", "--batch", "2", "--impl", "torch", "--backend", "events", "--repeat", "2"
        ),
    )


@pytest.fixture(scope="module")
def torch_ncu(profiles, ncu, tmp_path_factory) -> int:  # 49.1 s on an H200
    """The forward only: about 30 of the step's 140 library launches (the backward's kernels are
    joined in user_ncu); the first library join that failed on a GPU was conv1's forward."""
    needs_torch()
    return once(
        tmp_path_factory,
        "torch_ncu",
        lambda: profiled(
            profiles,
            "alexnet",
            "--batch",
            "1",
            "--impl",
            "torch",
            "--phases",
            "fwd",
            "--backend",
            "ncu",
            "--repeat",
            "1",
        ),
    )


@pytest.fixture(scope="module")
def user_events(profiles, tmp_path_factory) -> int:
    needs_torch()
    return once(
        tmp_path_factory,
        "user_events",
        lambda: profiled(profiles, "--torch", USER_MODEL, "--backend", "events", "--repeat", "2"),
    )


@pytest.fixture(scope="module")
def user_ncu(profiles, ncu, tmp_path_factory) -> int:  # 52.2 s on an H200
    needs_torch()
    return once(
        tmp_path_factory,
        "user_ncu",
        lambda: profiled(profiles, "--torch", USER_MODEL, "--batch", "6", "--backend", "ncu", "--repeat", "1"),
    )


@counters
def test_a_cupti_range_session_counts_each_launch():
    """The first step on a GPU: CUPTI's range profiler in tracker's own process (auto range,
    user replay) over one layer phase replayed per pass: a range per launch, numbered in launch order
    ('0', '1', ...: an H200 named conv1's forward '0'), with a duration, instructions and DRAM bytes
    (tests/cupti_probe.py)."""
    found = json.loads(child([sys.executable, str(ROOT / "tests" / "cupti_probe.py")], 120).stdout.splitlines()[-1])
    ranges = found["ranges"]
    assert found["passes"] >= 1 and len(ranges) == len(found["launched"]) > 0, found
    for i, (name, values) in enumerate(ranges):
        assert name == str(i) and values["gpu__time_duration.sum"] > 0 and values["smsp__inst_executed.sum"] > 0, found


@counters
def test_cupti_profile_of_ours_joins_every_launch(profiles, ours_cupti):
    """The collector end to end on the GPU: `--backend cupti` at batch 1, every launch of the
    measured iteration joined, its counters stored with ncu's names as their sources."""
    from tracker.store import metric_rows, open_store, run_sql

    store = open_store(profiles, write=False)
    run = check_launches(store, ours_cupti, "cupti")
    assert run["collector_version"] and run["collector_settings"]["replay"] == "user"
    stored = {row["name"] for row in metric_rows(store, ours_cupti)}
    check_counters(store, ours_cupti, stored)
    assert {"duration_ns", "instructions", "dram_read_bytes"} <= stored
    assert (
        dict(run_sql(store, f"SELECT name, source FROM metric_source WHERE run_id = {ours_cupti}")[1]).keys() == stored
    )


@counters
def test_cupti_and_ncu_agree_on_what_ncu_reproduces(profiles, ours_ncu, ours_cupti, runner):
    """`tracker agree` on the same launches, counted by ncu and by CUPTI: what is
    deterministic (instructions, FP32 instructions, global load sectors; two ncu runs agree on it
    exactly, tests/test_agreement.py) agrees within 5 % at every launch. The whole table is in the
    log as the test ends (printed), for the README's."""
    done = runner.invoke(cli, ["agree", str(ours_ncu), str(ours_cupti), "--db", profiles, "--format", "csv"])
    assert done.exit_code == 0, done.output
    print(done.stdout)
    rows = {r["metric"]: r for r in csv.DictReader(io.StringIO(done.stdout))}
    deterministic = ("instructions", "ffma", "fadd", "fp32_inst", "l1_global_load_sectors")
    assert all(rows[m]["agrees"] == "True" for m in deterministic), {m: rows.get(m) for m in deterministic}


@counters
def test_cupti_profile_of_the_library_joins_every_launch(tmp_path):
    """`--impl torch --backend cupti` on the GPU at batch 1, the whole step: the
    child (``tracker.implementations.child counted``) replays each of PyTorch's layer phases per pass, the
    backward's graphs kept, and every launch joins, the autograd engine's gradient sums included."""
    from tracker.store import metric_rows, open_store

    needs_torch()
    db = str(tmp_path / "cupti-torch.db")
    run_id = profiled(db, "alexnet", "--batch", "1", "--impl", "torch", "--backend", "cupti", "--repeat", "1")
    store = open_store(db, write=False)
    check_library(store, check_launches(store, run_id, "cupti"))
    stored = {row["name"] for row in metric_rows(store, run_id)}
    check_counters(store, run_id, stored)
    assert {"duration_ns", "instructions", "dram_read_bytes"} <= stored


def test_events_profile_of_ours_times_every_layer_phase(profiles, ours_events):
    from tracker.gpu.network import fitted_tiles
    from tracker.store import open_store

    store = open_store(profiles, write=False)
    run = check_launches(store, ours_events, "events")
    fitted = fitted_tiles(build("alexnet"), run["plan"], 2)  # 128 x 64 where N is 2 images' 32 Winograd tiles
    assert fitted and (run["implementation"], run["batch"], run["tiles"]) == ("ours", 2, fitted)
    check_starts(store, ours_events)


def check_starts(store, run_id: int) -> None:
    """Every launch of an events run knows when it began: the first at 0, then in invocation order
    on the one stream, each after the one before it ended (to the events' microsecond or so)."""
    from tracker.store import run_sql

    _, rows = run_sql(store, f"SELECT start_ns, time_ms FROM launch WHERE run_id = {run_id} ORDER BY invocation")
    assert rows and all(start is not None for start, _ in rows) and rows[0][0] == 0
    late = [i for i, ((a, ms), (b, _)) in enumerate(zip(rows, rows[1:])) if b < a + (ms or 0) * 1e6 - 2_000]
    assert not late, f"launches starting before the one before them ended: {late[:5]}"
    _, idle = run_sql(store, f"SELECT repeat, span_ms, idle_ms FROM iteration_idle WHERE run_id = {run_id}")
    assert idle and all(0 <= idle_ms < span_ms for _, span_ms, idle_ms in idle)  # the GPU's gaps, from the starts


@counters
def test_ncu_profile_of_ours_joins_every_launch(profiles, ours_ncu, ncu_counters):
    from tracker.store import open_store

    store = open_store(profiles, write=False)
    run = check_launches(store, ours_ncu, "ncu")
    assert run["collector_version"] and run["collector_settings"]["clock_control"] in ("base", "none")
    check_counters(store, ours_ncu, ncu_counters)
    from tracker.profilers.ncu import SOURCES
    from tracker.store import run_sql

    stored = dict(run_sql(store, f"SELECT name, source FROM metric_source WHERE run_id = {ours_ncu}")[1])
    assert stored == SOURCES.names(ncu_counters)  # ncu's own name of every metric it stored


def check_library(store, run: dict) -> None:
    """A library run records its versions and names the algorithm of every convolution phase."""
    from tracker.store import layer_rows

    assert run["implementation"] == "torch" and run["library"]["cudnn"]
    convs = {(r["layer"], r["phase"]): r["algorithm"] for r in layer_rows(store, run["id"]) if r["kind"] == "conv"}
    assert convs and all(convs.values()), convs


def test_the_library_arm_on_events_logs_every_layer_phase_with_its_algorithm(profiles, torch_events):
    from tracker.store import open_store

    store = open_store(profiles, write=False)
    check_library(store, check_launches(store, torch_events, "events"))
    check_starts(store, torch_events)


@counters
def test_the_library_arm_under_ncu_joins_every_launch(profiles, torch_ncu, ncu_counters):
    from tracker.store import open_store

    store = open_store(profiles, write=False)
    run = check_launches(store, torch_ncu, "ncu")
    assert run["phases"] == "fwd"
    check_library(store, run)
    check_counters(store, torch_ncu, ncu_counters)


def test_a_users_model_on_events_logs_every_module_call(profiles, user_events):
    from tracker.store import layer_rows, open_store

    store = open_store(profiles, write=False)
    run = check_launches(store, user_events, "events")
    assert (run["network"], run["implementation"], run["batch"]) == (USER_MODEL, "torch", 4)
    assert [r["layer"] for r in layer_rows(store, user_events) if r["phase"] == "fwd"] == [
        "stem",
        "bn",
        "act#1",
        "block",
        "act#2",
        "pool",
        "act#3",
        "head",
    ]


@counters
def test_a_users_model_under_ncu_joins_every_launch(profiles, user_ncu, ncu_counters):
    from tracker.store import open_store

    store = open_store(profiles, write=False)
    run = check_launches(store, user_ncu, "ncu")  # at --batch 6: the example's 4 samples repeated, in both passes
    assert (run["network"], run["implementation"], run["batch"]) == (USER_MODEL, "torch", 6)
    check_counters(store, user_ncu, ncu_counters)


@counters
def test_nvprof_profile_joins_every_launch(tmp_path):
    """Only on a GPU before Volta with nvprof installed; elsewhere it says why it skipped."""
    from tracker import profilers
    from tracker.errors import BackendUnavailable
    from tracker.gpu.detect import compute_capability
    from tracker.profilers.nvprof import SOURCES
    from tracker.store import metric_rows, open_store

    cc = compute_capability()
    if cc is None or not profilers.supports("nvprof", cc):
        pytest.skip(f"nvprof profiles GPUs before Volta; this one is compute capability {cc} (the ncu tests cover it)")
    try:
        profilers.find("nvprof")
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    db = str(tmp_path / "t.db")
    run_id = profiled(db, "alexnet", "--batch", "1", "--backend", "nvprof", "--repeat", "1")
    store = open_store(db, write=False)
    check_launches(store, run_id, "nvprof")
    names = {row["name"] for row in metric_rows(store, run_id)}
    assert names and names <= set(SOURCES.by_metric)
    check_counters(store, run_id, names)


RUNS = ("ours_events", "torch_events", "user_events")
COUNTED_RUNS = ("ours_ncu", "torch_ncu", "user_ncu")


UNET = ("--batch", "2", "--input-size", "32", "--base-filters", "4", "--depth", "2")  # every layer kind, small


@pytest.mark.parametrize(
    "network, implementation", [("unet2d", "ours"), ("unet2d", "torch"), ("unet3d", "ours"), ("unet3d", "torch")]
)
def test_a_unet_profiles_every_layer_phase_on_events(network, implementation, tmp_path, runner):
    """The seeds' U-Nets layer phase by layer phase: the skips' concatenation, the
    up-sampling, the sigmoid with its loss; the 3-D one's 3-D convolutions and pools, batch norm
    and transposed convolutions; ours beside PyTorch's per layer phase."""
    from tracker.store import open_store

    if implementation == "torch":
        needs_torch()
    db = str(tmp_path / "t.db")
    run_id = profiled(db, network, *UNET, "--impl", implementation, "--backend", "events", "--repeat", "2")
    run = check_launches(open_store(db, write=False), run_id, "events")
    assert run["measured_peak_bytes"] > 0
    if implementation == "torch":
        ours = profiled(db, network, *UNET, "--backend", "events", "--repeat", "2")
        compared = runner.invoke(cli, ["compare", str(ours), str(run_id), "--db", db, "--format", "json"])
        assert compared.exit_code == 0, compared.output


def test_pytorchs_3d_concatenation_at_batch_1_is_timed_as_its_copies(tmp_path):
    """At batch 1 PyTorch's 3-D U-Net concatenated without a kernel on an H200 (stage 10,
    tests/data/gpu-2026-11-26f-h200), its time missing: pass 1 now logs the trace's copies and
    fills (``kineto.device_work``), so every concatenation forward has launches, each a timed
    device-to-device copy."""
    from tracker.kernel_names import is_transfer
    from tracker.store import launch_rows, layer_rows, open_store

    needs_torch()
    db = str(tmp_path / "t.db")
    small = ("--input-size", "32", "--base-filters", "4", "--depth", "2")
    run_id = profiled(db, "unet3d", "--batch", "1", *small, "--impl", "torch", "--backend", "events", "--repeat", "1")
    store = open_store(db, write=False)
    check_launches(store, run_id, "events")  # every concatenation forward launched something
    kinds = {r["layer_id"]: r["kind"] for r in layer_rows(store, run_id)}
    joined = [k for k in launch_rows(store, run_id) if kinds[k["layer_id"]] == "concat" and k["phase"] == "fwd"]
    assert all(is_transfer(k["kernel_name"]) and k["role"] == "copy" for k in joined), joined


@pytest.mark.parametrize("fixture", RUNS)
def test_report_show_and_export_of_each_run(fixture, profiles, request, runner, tmp_path):
    """What a user reads of a measured run: `tracker report`, `tracker show` (every launch and
    counter the store holds) and `tracker export`."""
    check_reads(request.getfixturevalue(fixture), profiles, runner, tmp_path, counted=False)


@counters
@pytest.mark.parametrize("fixture", COUNTED_RUNS)
def test_report_show_and_export_of_each_counted_run(fixture, profiles, request, runner, tmp_path):
    """The same of a run under ncu, with every counter figure of the report drawn."""
    check_reads(request.getfixturevalue(fixture), profiles, runner, tmp_path, counted=True)


def check_reads(run_id: int, profiles: str, runner, tmp_path: Path, counted: bool) -> None:
    from tracker.export import TABLES
    from tracker.store import launch_rows, metric_rows, open_store
    from tracker.store.views import VIEWS

    check_report(runner, profiles, str(run_id), tmp_path / "report", counters=counted)
    shown = runner.invoke(cli, ["show", str(run_id), "--db", profiles, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    store = open_store(profiles, write=False)
    stored = json.loads(shown.stdout)
    assert (len(stored["launches"]), len(stored["metrics"])) == (
        len(launch_rows(store, run_id)),
        len(metric_rows(store, run_id)),
    )
    exported = runner.invoke(cli, ["export", str(run_id), "--db", profiles, "--out", str(tmp_path / "csv")])
    assert exported.exit_code == 0, exported.output
    assert {p.name for p in (tmp_path / "csv").iterdir()} == {
        f"{name}.csv" for name in (*TABLES, *(v.name for v in VIEWS), "metric_def")
    }


@counters
def test_runs_lists_every_measured_run_complete(profiles, ours_events, ours_ncu, runner):
    listed = runner.invoke(cli, ["runs", "--db", profiles, "--format", "json"])
    assert listed.exit_code == 0, listed.output
    rows = {r["run_id"]: r for r in json.loads(listed.stdout)}
    assert {(rows[i]["status"], rows[i]["backend"]) for i in (ours_events, ours_ncu)} == {
        ("complete", "events"),
        ("complete", "ncu"),
    }


def test_compare_ours_against_the_library_per_layer_phase(profiles, ours_events, torch_events, runner):
    from tracker.store import find_run, open_store, run_dict

    compared = runner.invoke(
        cli, ["compare", str(ours_events), str(torch_events), "--db", profiles, "--format", "json"]
    )
    assert compared.exit_code == 0, compared.output
    rows = json.loads(compared.stdout)
    store = open_store(profiles, write=False)
    phases = planned(store, run_dict(find_run(store, ours_events)))
    assert {(r["layer"], r["phase"]) for r in rows if r["layer"] != "iteration"} == set(phases)
    assert all(r["speedup"] > 0 for r in rows)
    assert all(r.get("algorithm_b") for r in rows if phases.get((r["layer"], r["phase"])) == "conv")


def test_gate_and_history_read_the_gpus_runs(profiles, ours_events, torch_events, runner):
    """PyTorch's step gated against ours (two implementations, said so), both timed over two
    iterations so every spread is known; and our runs of the workload over the commits that made them."""
    gated = runner.invoke(cli, ["gate", str(torch_events), "--against", str(ours_events), "--across", "implementation",
                                "--db", profiles, "--format", "json"])  # fmt: skip
    assert gated.exit_code in (0, 1), gated.output
    rows = json.loads(gated.stdout)
    assert rows[-1]["layer"] == "iteration" and rows[-1]["beyond_spread"] is not None
    assert gated.exit_code == (1 if any(r["regression"] for r in rows) else 0)
    history = runner.invoke(cli, ["history", "--network", "alexnet", "--batch", "2", "--impl", "ours", "--db", profiles,
                                  "--format", "json"])  # fmt: skip
    assert history.exit_code == 0, history.output
    listed = json.loads(history.stdout)
    assert ours_events in [r["run_id"] for r in listed] and all(r["iteration_ms"] for r in listed)


# Experiments: every kind, at tiny batch, on events ---------------------------------------------

EXPERIMENTS = {  # kind -> its options as tracker.experiment.arms takes them: few arms, and each kind's own axis
    "l1-bypass": {"variants": ("shared",)},  # 3 arms: ca, cg, ca staged (5 with global: 22.9 s on an H200)
    "fusion": {},
    "variants": {"variants": ("global", "shared")},  # every variant: the selftest; winograd and fft: algorithms
    "batch": {"batches": (1, 2)},
    "library": {},
    "algorithms": {},
    "memory": {"batches": (2,)},  # ours and PyTorch's measured peak beside the model's (two arms: 28.5 s with four)
}


@pytest.mark.parametrize("kind", EXPERIMENTS)
def test_experiment_runs_every_arm_and_reports(kind, tmp_path, runner):  # 10-40 s each
    """Every arm complete on this GPU with its planned launches, the kind's table complete, and the
    experiment's report."""
    from tracker.analysis.experiments import results
    from tracker.experiment import arms
    from tracker.store import find_experiment, open_store

    if kind in ("library", "memory"):
        needs_torch()
    db = str(tmp_path / "t.db")
    options = [a for key, values in EXPERIMENTS[kind].items() for a in (f"--{key}", ",".join(map(str, values)))]
    tracker(
        "experiment",
        kind,
        "alexnet",
        "--batch",
        "2",
        *options,
        "--backend",
        "events",
        "--repeat",
        "2",
        "--db",
        db,
        "--format",
        "json",
    )
    store = open_store(db, write=False)
    experiment_id = find_experiment(store, "last").id
    listed = runner.invoke(cli, ["experiments", f"e{experiment_id}", "--db", db, "--format", "json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert [(r["arm"], r["state"]) for r in rows] == [(a.label, "complete") for a in arms(kind, 2, **EXPERIMENTS[kind])]
    runs = {r["arm"]: check_launches(store, r["run"], "events") for r in rows}
    assert {run["device_name"] for run in runs.values()} == {r["device"] for r in rows}
    check_table(kind, results(store, experiment_id, kind), {arm: planned(store, run) for arm, run in runs.items()})
    check_report(runner, db, f"e{experiment_id}", tmp_path / "report")


def check_table(kind: str, table, phases: dict[str, dict[tuple[str, str], str]]) -> None:
    """The table `tracker experiment KIND` prints: a row, with a time, for every layer phase that
    both runs of a comparison launched (``phases``: each arm's planned layer phases)."""
    if kind == "batch":
        assert set(table["batch"]) == {1, 2} and (table["ms"] > 0).all()
        return
    if kind == "memory":  # the measured peak beside the model's, each arm
        assert (table["state"] == "complete").all() and (table["measured_peak_bytes"] > 0).all()
        assert (table["predicted_peak_bytes"] > 0).all() and set(table["implementation"]) == {"ours", "torch"}
        return
    if kind == "fusion":  # a row per ReLU phase the fused kernels absorbed
        pairs = table[table["layer"] != "iteration"]
        separate, fused = phases["separate"], phases["fused"]
        assert sorted(zip(pairs["relu"], pairs["phase"])) == sorted(key for key in separate if key not in fused)
        assert (pairs["separate_ms"] > 0).all()
        # a fused time where the producer runs that phase (conv1 has no data gradient: relu1's just goes)
        assert all((r.fused_ms > 0) is ((r.layer, r.phase) in fused) for r in pairs.itertuples())
        assert (table[table["layer"] == "iteration"]["speedup"] > 0).all()
        return
    per_layer = table[table["layer"] != "iteration"]
    for (base, arm), rows in per_layer.groupby(["baseline_arm", "arm"]):
        both = {key: k for key, k in phases[arm].items() if key in phases[base]}
        if kind == "algorithms":
            both = {key: k for key, k in both.items() if k == "conv"}
        timed = {(r.layer, r.phase) for r in rows.itertuples() if r.speedup > 0}
        assert timed == set(both), (base, arm)
        if kind in ("library", "algorithms"):  # the algorithm each side ran
            assert rows[rows["kind"] == "conv"]["algorithm_b"].notna().all(), (base, arm)
    assert set(table["arm"]) == set(phases) - set(table["baseline_arm"])
    assert (table[table["layer"] == "iteration"]["speedup"] > 0).all()
    if kind == "l1-bypass":  # the staged arm beside each cg arm of a GEMM-shaped variant: what L1 alone is worth
        assert table[table["arm"] == "shared cg"]["l1_speedup"].notna().all()


class Queued:
    """An executor that runs nothing: the arms stay queued, as `--executor slurm --detach` leaves them."""

    name = "local"

    def check(self, db, net, backend) -> None:
        pass

    def reconcile(self, store, experiment_id, echo) -> None:
        pass

    def run(self, sweep) -> None:
        pass


def test_arm_runs_a_queued_arm_as_a_cluster_task_does(tmp_path, runner):
    """`tracker arm EXPERIMENT POSITION`, what each Slurm task runs on its node: each queued arm
    of a fusion experiment run on this GPU; the last one settles the experiment."""
    from tracker.experiment import run_experiment
    from tracker.store import experiment_dict, find_experiment, open_store
    from tracker.store.queries import arm_rows

    db = str(tmp_path / "t.db")
    experiment_id = run_experiment(db, "fusion", build("alexnet"), 2, backend="events", repeat=2, executor=Queued())
    for position in (0, 1):
        done = tracker("arm", f"e{experiment_id}", str(position), "--db", db)
        assert f"arm {position} of e{experiment_id} complete: run " in done.stdout
    store = open_store(db, write=False)
    arms = arm_rows(store, experiment_id)
    assert [a.state for a in arms] == ["complete", "complete"] and all(a.device_name for a in arms)
    for a in arms:
        check_launches(store, a.run_id, "events")
    assert experiment_dict(find_experiment(store, experiment_id), arms)["status"] == "complete"


# The schedule search and the kernel benchmark --------------------------------------------------


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> tuple[str, list[dict]]:  # about 15 s: the budget, and the candidate in hand
    """`tracker tune --quick` at batch 2 with a 10-second budget (34 s with 30 on an H200): its
    database and its table."""
    db = str(shared_folder(tmp_path_factory) / "tuning.db")
    rows = once(
        tmp_path_factory,
        "tuned",
        lambda: json.loads(
            tracker(
                "tune",
                "alexnet",
                "--batch",
                "2",
                "--quick",
                "--reps",
                "2",
                "--verify-batch",
                "1",
                "--budget",
                "10",
                "--db",
                db,
                "--format",
                "json",
            ).stdout
        ),
    )
    return db, rows


def test_tune_stores_every_candidate_verified_and_timed(tuned):
    from tracker.store import open_store
    from tracker.store.queries import view_frame
    from tracker.tune import targets

    db, rows = tuned
    assert [(r["layer"], r["phase"], r["variant"]) for r in rows] == [
        (t.layer, t.phase, t.variant) for t in targets(build("alexnet"), 2, {}, 1)
    ]
    searched = [r for r in rows if r["tried"]]
    assert searched and all(r["best"] and r["best_ms"] > 0 for r in searched)
    candidates = view_frame(open_store(db, write=False), "tuning")
    assert len(candidates) == sum(r["tried"] for r in rows)
    assert candidates["verified"].astype(bool).all() and (candidates["time_ms"] > 0).all()
    assert set(candidates["timer"]) == {"events"}


@pytest.mark.parametrize("untuned", [False, True])
def test_profile_runs_the_tuned_tiles_unless_untuned(tuned, untuned):
    from tracker.gpu.network import fitted_tiles
    from tracker.store import open_store
    from tracker.tune import best

    db, _ = tuned
    run_id = profiled(
        db, "alexnet", "--batch", "2", "--backend", "events", "--repeat", "1", *(["--untuned"] if untuned else [])
    )
    store = open_store(db, write=False)
    run = check_launches(store, run_id, "events")
    tuned = best(store, run["device_name"], build("alexnet"), 2, {})
    ran = tuned.over(fitted_tiles(build("alexnet"), run["plan"], 2))  # the plan's fitted tiles where none was tuned
    assert (run["tiles"], run["tuned_variants"]) == (({}, {}) if untuned else (ran, tuned.variants))


def test_the_kernel_benchmark_times_every_variant_where_it_applies(tuned, tmp_path):  # about 40 s
    """benchmarks/kernels.py with the tuned tiles, at batch 2 and 2 repetitions: each layer phase's
    variants that apply there (``Op.applying``)."""
    from tracker.model import costs
    from tracker.ops import OPS

    db, _ = tuned
    out = tmp_path / "RESULTS.md"
    child([sys.executable, "benchmarks/kernels.py", "--batch", "2", "--reps", "2", "--db", db, "--out", str(out)], 600)
    text = out.read_text()
    net = build("alexnet")
    rows = {
        tuple(line.split(" | ")[:2]): line.split(" | ")[2]
        for line in text.splitlines()
        if line.startswith("| ") and re.match(r"\| \S+ \| \S+ \| \S+ [\d.]+ \(", line)
    }
    expected = {
        (f"| {case.layer}", phase): list(OPS[case.op].applying(case, phase))
        for case in network_cases(net, 2)
        for phase in OPS[case.op].phases
        if phase in costs(net.layer(case.layer), 2)
    }
    assert set(rows) == set(expected)
    assert all(re.findall(r"(\S+) [\d.]+ \(", rows[key]) == variants for key, variants in expected.items())
    assert (
        "## Whole training iteration, batch 2" in text
        and "GEMM tiles as `tracker tune` stored them in tuning.db" in text
    )
