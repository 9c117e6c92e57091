"""`tracker tune` (tracker/tune.py) and the GEMM schedules it searches, on the CPU emulation:
every candidate tile shape, split-K included, matches the NumPy reference; the search stores
every candidate it tried; the plan runs the fastest verified one; without a GPU it refuses."""

from __future__ import annotations

from dataclasses import replace

import pytest
from step_check import step_errors
from tile_schedules import RING, SCHEDULES, TRANSFORMS, classes, every_class

from tracker import tune
from tracker.cli import cli
from tracker.ops import OPS
from tracker.ops.gemm import DEFAULT, SHAPES, Tile
from tracker.ops.selftest import run_case, small_cases
from tracker.store import open_store

# The transposed convolutions run the convolutions' own kernels (covered here already), and one
# case of the 3-D convolution reaches its loaders at each schedule: the rest prove nothing new per tile.
REPEATS = ("convtranspose", "convtranspose3d")
TUNABLE = [
    (case, name)
    for case in small_cases()
    for name, variant in OPS[case.op].variants.items()
    if any(launch.tunable for launch in variant.launches.values())
    and name not in TRANSFORMS
    and case.op not in REPEATS
    and (case.op != "conv3d" or case == OPS["conv3d"].small_cases[0])
]


@pytest.fixture(scope="module")
def schedules_compiled(emulator):
    """The builds the tiles below launch, compiled all at once: the modules of TUNABLE's GEMM-shaped
    launches (not the transforms', which TUNABLE leaves out), at every schedule."""
    sources = sorted(
        {
            k.source
            for case, name in TUNABLE
            for launch in OPS[case.op].variants[name].launches.values()
            if launch.tunable
            for k in launch.kernels
        }
    )
    emulator.prepare((source, tile.overrides) for tile in SCHEDULES for source in sources)


@pytest.mark.usefixtures("schedules_compiled")
@pytest.mark.parametrize("tile", [replace(tile, split=3) for tile in SCHEDULES], ids=lambda t: t.label)
def test_every_candidate_tile_matches_the_reference(emulator, tile):
    """Every schedule `tracker tune` can run, with the reduction cut in (up to) three slices, on
    every GEMM-shaped variant of conv and linear at the small cases."""
    emulator.log.clear()
    for case, variant in TUNABLE:
        if variant == "fused" and not tile.fits(masked=True):  # its backward's mask ring does not fit beside
            with pytest.raises(ValueError, match=f"tile {tile.label} with the ReLU mask's ring needs"):
                run_case(emulator, case, variant, seed=2, tile=tile)
            continue
        results = run_case(emulator, case, variant, seed=2, tile=tile)
        failed = [(case.layer, variant, r.phase, r.output, r.error) for r in results if not r.passed]
        assert results and not failed, failed
    gemms = [r for r in emulator.log if r.block == (tile.threads, 1, 1) and r.kernel != "im2col"]
    assert gemms and any(r.grid[2] > 1 for r in gemms)  # split-K ran ...
    assert any(r.kernel == "splitk_reduce" for r in emulator.log)  # ... and its reduction


def test_split_k_is_chosen_from_the_shape_and_the_gpus_slots():
    """The rule without a tuning: the fewest slices that keep 90 % of the GPU's CTA slots busy over
    whole waves, 16 k-tiles a slice at least (264 slots: an H100's 132 SMs x 2 CTAs)."""
    # a weight gradient at batch 128: M = 64 filters, N = 3*11*11, K = 128 * 55*55: 3 output tiles
    assert DEFAULT.splits(64, 363, 128 * 55 * 55, 264) == 80  # 240 CTAs: 91 % of one wave
    assert DEFAULT.splits(128, 4096, 9216, 264) == 8  # fc6 forward: 32 output tiles, 256 CTAs (9: 2 waves, 55 %)
    assert DEFAULT.splits(128, 4096, 9216, 132) == 4  # one CTA an SM: half as many
    assert DEFAULT.splits(192, 128 * 27 * 27, 1600, 264) == 1  # conv2 forward: 1,458 output tiles
    assert DEFAULT.splits(64, 64, 100, 264) == 1  # too short a reduction to cut
    assert DEFAULT.splits(128, 4096, 1000, 264) == 8  # fc8's data gradient: 125 k-tiles, 16 a slice (the last 13)
    tile = Tile(128, 128, 8, split=64)
    assert tile.splits(64, 64, 8 * 10, 264) == 10  # never more slices than k-tiles
    assert tile.k_chunk(8 * 10, 10) == 8
    assert Tile.parse("64x128x16/split4") == Tile(64, 128, 16, 4) and Tile.parse(DEFAULT.label) == DEFAULT


def test_a_tile_names_what_differs_from_the_default_and_its_neighbours_fit():
    tile = Tile(64, 64, 8, split=2, stages=4, warp_rows=8, min_ctas=1)
    assert tile.label == "64x64x8/stages4/warp8x4/ctas1/split2" and Tile.parse(tile.label) == tile
    with pytest.raises(ValueError, match="'ring3' is not"):
        Tile.parse("64x64x8/ring3")
    # the rings of A and B, padded, in shared memory: 2 x 8 x (128 + 4 + 128 + 4) floats
    assert DEFAULT.shared_bytes == 16896 and DEFAULT.defines()["STAGES"] == 2
    assert DEFAULT.label == "128x128x8/ctas2"  # two CTAs an SM: registers capped at 128
    assert [t.label for t in DEFAULT.neighbours()] == [
        "128x128x8/stages3/ctas2",
        "128x128x8/stages4/ctas2",
        "128x128x8/warp8x4/ctas2",
        "128x128x8",
        "128x128x8/ctas1",
    ]
    # two CTAs of 64 threads fit an SM at any register count: a cap of 2 would change nothing
    assert "64x64x8/ctas2" not in {t.label for t in Tile(64, 64, 8).neighbours()}
    # 3 stages of 128 x 128 x 16 need up to 55,296 bytes (rows padded 16 floats where 16 loader
    # lanes cover a row), past the 48 KiB a CTA's static arrays may take; 32 x 64 has no room for
    # 8 x 4 warps (64 rows)
    assert Tile(128, 128, 16, stages=3).shared_bytes == 55296
    assert [t.label for t in Tile(128, 128, 16).neighbours()] == [
        "128x128x16/warp8x4",
        "128x128x16/ctas1",
        "128x128x16/ctas2",
    ]
    assert not Tile(32, 64, 8, warp_rows=8).valid and [t.label for t in Tile(32, 64, 8).neighbours()] == [
        "32x64x8/stages3",
        "32x64x8/stages4",
        "32x64x8/ctas1",
    ]
    assert all(t.valid for t in SCHEDULES) and len(set(SCHEDULES)) == len(SCHEDULES) == 14 and RING in SCHEDULES
    assert classes(SCHEDULES) == every_class()  # every shape, ring depth and warp layout runs
    every_neighbour = {t for shape in SHAPES for t in (shape, *shape.neighbours()) if t.min_ctas == 0}
    assert set(SCHEDULES) - {Tile(64, 64, 8, stages=4, warp_rows=8)} <= every_neighbour  # all tune can try


def test_tune_stores_every_candidate_and_the_plan_runs_the_fastest(emulator, tmp_path):
    from samples import small_net

    from tracker.gpu.network import PlanRunner

    net, chosen = small_net(), {"conv": "fused", "linear": "shared"}
    found = tune.targets(net, batch=3, chosen=chosen, verify_batch=1)
    assert {(t.layer, t.phase) for t in found} == {
        (layer, phase) for layer in ("conv1", "conv2", "fc3", "fc4") for phase in ("fwd", "bwd_data", "bwd_weight")
    } - {("conv1", "bwd_data")}  # the first layer has none
    tiles = (DEFAULT, Tile(64, 64, 8, split=2))
    rows = tune.search(emulator, found, tiles, reps=1, device_name="CPU emulation", refine=False)
    assert len(rows) == 2 * len(found)
    assert all(r["verified"] and r["timer"] == "wall" and r["time_ms"] > 0 for r in rows)

    store = open_store(str(tmp_path / "trace.db"), write=True)
    tune.store(store, rows)
    assert tune.best(store, "another GPU", net, 3, chosen) == tune.Tuned()  # tunings are per GPU
    picked = tune.best(store, "CPU emulation", net, 3, chosen)
    expected = {f"{t.layer}/{t.phase}": tune.fastest(rows, t)["tile"] for t in found}
    assert picked == tune.Tuned(
        {key: tile for key, tile in expected.items() if tile != DEFAULT.label}, {}, frozenset(expected)
    )
    store.dispose()

    # the executor runs a tuned tile where it is given one, and the step still matches NumPy
    tuned = {f"{t.layer}/{t.phase}": "64x64x8/split2" for t in found}
    emulator.log.clear()
    run = PlanRunner(emulator, net, batch=3, chosen=chosen, seed=4, tiles=tuned)
    run.iteration()
    ran = {(r.context.layer.name, r.context.phase) for r in emulator.log if r.block == (64, 1, 1)}
    assert ran == {(t.layer, t.phase) for t in found}
    loss, expected, errors = step_errors(run)
    assert loss == pytest.approx(expected, rel=1e-5)
    assert errors["conv1"][0] < 1e-4 and errors["fc3"][0] < 1e-4


def test_tune_races_each_algorithm_that_can_run_a_conv_layer_phase_unless_a_variant_was_chosen():
    """Each conv layer phase by every variant that computes it by an algorithm of its own (Winograd
    and FFT only at stride 1), the planned one first (the conv rule's Winograd F(4x4) where it
    applies); a variant chosen with --variant (or a fused conv, which changes the plan) alone."""
    from samples import small_net

    def raced(chosen):
        found: dict[tuple[str, str], list[str]] = {}
        for t in tune.targets(small_net(), batch=3, chosen=chosen, verify_batch=1):
            found.setdefault((t.layer, t.phase), []).append(t.variant)
            assert t.planned == found[t.layer, t.phase][0]
        return found

    anywhere = ["shared", "global", "constant", "gemm"]  # implicit GEMM (the plan's), direct, explicit GEMM
    stride_1 = ["winograd_f4", "global", "constant", "shared", "gemm", "winograd", "fft"]
    found = raced({"linear": "shared"})
    assert found == {
        ("conv1", "fwd"): anywhere,
        ("conv1", "bwd_weight"): anywhere,
        **{("conv2", phase): stride_1 for phase in ("fwd", "bwd_data", "bwd_weight")},
        **{(fc, phase): ["shared"] for fc in ("fc3", "fc4") for phase in ("fwd", "bwd_data", "bwd_weight")},
    }
    assert {tuple(v) for key, v in raced({"conv": "shared"}).items() if key[0].startswith("conv")} == {("shared",)}
    assert raced({"conv": "shared"})["fc3", "fwd"] == ["shared", "global"]  # linear not chosen: its direct kernel races
    assert {tuple(v) for key, v in raced({"conv": "fused"}).items() if key[0].startswith("conv")} == {("fused",)}


def test_tune_covers_the_3d_unets_convolutions_and_the_tuned_step_still_matches(emulator):
    """unet3d's tunable layer phases are its 3-D convolutions and transposed convolutions (their
    shared variants run the GEMM core); a tuned tile runs in each, and the step matches NumPy."""
    from tracker.gpu.network import PlanRunner
    from tracker.nets import build

    net = build("unet3d", input_size="8", in_channels=1, base_filters=2, depth=2, classes=2)
    found = tune.targets(net, batch=2, chosen={}, verify_batch=1, distinct=False)
    assert {t.op for t in found} == {"conv3d", "convtranspose3d"}
    assert {(t.layer, t.phase) for t in found} == {
        (layer.name, phase) for layer in net.layers if layer.kind in ("conv", "convtranspose") for phase in layer.phases
    }
    rows = tune.search(
        emulator,
        [t for t in found if t.layer in ("enc1_conv2", "up1")],
        (Tile(64, 64, 8, split=2),),
        reps=1,
        device_name="CPU emulation",
        refine=False,
    )
    assert rows and all(r["verified"] for r in rows)
    tuned = {f"{t.layer}/{t.phase}": "64x64x8/split2" for t in found}
    emulator.log.clear()
    run = PlanRunner(emulator, net, batch=2, chosen={}, seed=5, tiles=tuned)
    run.iteration()
    assert {(r.context.layer.name, r.context.phase) for r in emulator.log if r.block == (64, 1, 1)} == {
        (t.layer, t.phase) for t in found
    }
    loss, expected, errors = step_errors(run)
    assert loss == pytest.approx(expected, rel=1e-5)
    assert max(max(pair) for pair in errors.values()) < 1e-4, errors


def test_tune_then_tries_the_fastest_tiles_neighbours(emulator):
    """After the grid of shapes, the fastest verified tile's other pipeline depths and warp
    layout are tried too, each verified against the reference."""
    from samples import small_net

    target = next(
        t
        for t in tune.targets(small_net(), batch=3, chosen={"linear": "shared"}, verify_batch=1)
        if (t.layer, t.phase) == ("fc3", "fwd")
    )
    rows = tune.search(emulator, [target], (DEFAULT,), reps=1, device_name="CPU emulation")
    assert [r["tile"] for r in rows] == [DEFAULT.label, *(t.label for t in DEFAULT.neighbours())]
    assert all(r["verified"] for r in rows)


def test_a_candidate_that_fails_is_reported_and_the_search_goes_on(emulator):
    """A tile common.cuh refuses (8 x 4 warps need 64 rows) fails to compile: the search says so,
    keeps the others, and hands each target's rows on as it finishes."""
    from samples import small_net

    found = [
        t
        for t in tune.targets(small_net(), batch=3, chosen={"linear": "shared"}, verify_batch=1)
        if t.layer == "fc3" and t.phase in ("fwd", "bwd_data")
    ]
    said, kept = [], []
    rows = tune.search(
        emulator,
        found,
        (Tile(32, 64, 8, warp_rows=8), DEFAULT),
        reps=1,
        device_name="CPU emulation",
        echo=said.append,
        refine=False,
        keep=kept.append,
    )
    assert [r["tile"] for r in rows] == [DEFAULT.label] * 2 and kept == [[rows[0]], [rows[1]]]
    assert sum("32x64x8/warp8x4 failed (CalledProcessError" in line for line in said) == 2


def test_a_256_thread_tile_times_its_gemm_not_the_reduction_beside_it(emulator):
    """A 128 x 128 tile has as many threads as the split-K reduction and the bias gradient, whose
    grids are one-dimensional: the slices that ran are read from the GEMM's grid. On the H100
    every such candidate failed (IndexError) while the CuPy backend logged grids as spelled and
    the emulator padded them; a LaunchRecord now holds dim3 sizes on every backend."""
    from tracker.ops.launch import LaunchRecord

    assert LaunchRecord("gemm.cu", "splitk_reduce", (7,), (256,), 0, None).grid == (7, 1, 1)
    from samples import small_net

    found = [
        t
        for t in tune.targets(small_net(), batch=3, chosen={"conv": "shared", "linear": "shared"}, verify_batch=1)
        if (t.layer, t.phase) in {("fc3", "fwd"), ("conv2", "bwd_weight")}
    ]
    said: list[str] = []
    tile = replace(DEFAULT, split=2)
    assert tile.threads == 256
    rows = tune.search(emulator, found, (tile,), reps=1, device_name="CPU emulation", echo=said.append, refine=False)
    assert not [line for line in said if "failed" in line]
    assert [(r["layer"], r["tile"], r["splits"], r["verified"]) for r in rows] == [
        (t.layer, "128x128x8/ctas2/split2", 2, True) for t in found
    ]


def test_tune_says_which_tile_profile_now_runs_even_one_an_earlier_search_found(emulator, tmp_path, monkeypatch):
    """On the H100 a full search's table named its own fastest tiles while the plan ran a faster
    one the quick search had stored: ``runs`` is what the plan takes from the database."""
    from samples import small_net

    from tracker.gpu import runner

    net, chosen, db = small_net(), {"conv": "shared", "linear": "shared"}, str(tmp_path / "trace.db")
    fc3 = [t for t in tune.targets(net, batch=3, chosen=chosen, verify_batch=1) if (t.layer, t.phase) == ("fc3", "fwd")]
    earlier = tune.search(emulator, fc3, (Tile(64, 64, 8, split=2),), reps=1, device_name="CPU emulation", refine=False)
    store = open_store(db, write=True)
    tune.store(store, earlier)
    store.dispose()
    monkeypatch.setattr(runner, "open_cupy_backend", lambda policy: (emulator, {"device_name": "CPU emulation"}))
    said: list[str] = []
    rows = tune.run(db, net, 3, chosen, reps=1, verify_batch=1, quick=True, echo=said.append, budget_s=1e-9)
    by_phase = {(r["layer"], r["phase"]): r for r in rows}
    assert by_phase["fc3", "fwd"]["best"] is None and by_phase["fc3", "fwd"]["runs"] == "shared 64x64x8/split2"
    assert {r["runs"] for key, r in by_phase.items() if key != ("fc3", "fwd")} == {f"shared {DEFAULT.label}"}
    assert "[1/" in said[1] and said[1].endswith("none tried")


def test_a_spent_time_budget_starts_no_candidate(emulator):
    from time import perf_counter

    from samples import small_net

    found = tune.targets(small_net(), batch=3, chosen={"linear": "shared"}, verify_batch=1)
    said: list[str] = []
    rows = tune.search(
        emulator, found, (DEFAULT,), reps=1, device_name="CPU emulation", echo=said.append, deadline=perf_counter()
    )
    assert rows == [] and said[-1] == f"time budget spent: 1 of {len(found)} layer phases searched"


def test_tune_refuses_without_a_gpu_in_one_line(runner, tmp_path):
    db = tmp_path / "trace.db"
    result = runner.invoke(cli, ["tune", "alexnet", "--batch", "8", "--db", str(db)])
    assert result.exit_code != 0
    assert result.output.strip().count("\n") == 0 and "tracker tune needs an NVIDIA GPU" in result.output
    assert not db.exists()  # nothing written
