"""The default plan's GEMM tile for the Winograd and FFT variants' batched GEMMs, with no GPU: each
side of the CTA tile fitted to the GEMM's M and N (``gemm.fitted``), the GEMM each variant says it
launches (``Variant.gemm``) being the one its launchers launch, and what ``tracker profile``'s plan
runs and records (run.tiles): the fitted tile where nothing was tuned, none with --untuned, and a
tuned tile over it."""

from __future__ import annotations

import pytest

from tracker.gpu.network import PlanRunner, fitted_tiles, plan, plan_of
from tracker.gpu.workload import Workload
from tracker.implementations.ours import IMPLEMENTATION
from tracker.nets import build
from tracker.nets.layers import Linear, Network, ReLU, Softmax, conv, maxpool
from tracker.ops import OPS
from tracker.ops.gemm import DEFAULT, IDLE, SHAPES, SIDES, Tile, fitted
from tracker.ops.launch import tiles
from tracker.store import open_store

TRANSFORMS = ("winograd", "winograd_f4", "fft")


@pytest.mark.parametrize(
    "M, N, label",
    [
        (64, 64, "64x64x8/ctas2"),  # one 64-row tile: no padding, where 128 pads half
        (192, 64, "64x64x8/ctas2"),  # 3 tiles of 64 against 2 of 128, a quarter padding
        (384, 192, "128x64x8/ctas2"),  # 384: 3 tiles of 128 pad nothing either; 128 on the tie
        (96, 6272, "128x128x8/ctas2"),  # 96 pads 32 either way; AlexNet conv2's 128 x 7 x 7 tiles
        (192, 100_000, "64x128x8/ctas2"),  # large N: 128 leaves 96 of 100,096 idle, under IDLE
        (64, 1_088, "64x128x8/ctas2"),  # 128 leaves 64 of 1,152 columns idle (5.6 %): under IDLE
        (64, 320, "64x64x8/ctas2"),  # 128 leaves 64 of 384 idle (16.7 %), 64 none
    ],
)
def test_a_side_is_64_only_where_128_leaves_over_a_tenth_padding_and_64_less(M, N, label):
    tile = fitted(M, N)
    assert tile.label == label
    for extent, side in ((M, tile.m), (N, tile.n)):
        idle = {s: 1 - extent / (tiles(extent, s) * s) for s in SIDES}
        assert (side == 64) == (idle[128] > IDLE and idle[64] < idle[128]), (extent, idle)


def test_every_fitted_tile_is_a_shape_tune_runs_with_the_defaults_schedule():
    shapes = {(s.m, s.n, s.k) for s in SHAPES}
    for m in SIDES:
        for n in SIDES:
            tile = fitted(m, n)  # a GEMM exactly m x n: its sides are m and n
            assert (tile.m, tile.n) == (m, n) and (tile.m, tile.n, tile.k) in shapes and tile.valid
            assert (tile.k, tile.stages, tile.warp_rows, tile.min_ctas, tile.split) == (
                DEFAULT.k,
                DEFAULT.stages,
                DEFAULT.warp_rows,
                DEFAULT.min_ctas,
                DEFAULT.split,
            )


@pytest.mark.parametrize("variant", TRANSFORMS)
def test_each_transform_variant_says_the_gemm_its_launchers_launch(tmp_path, variant):
    """AlexNet at batch 128 on the emulation without running (launch geometry only), every conv
    phase given a 64 x 128 tile: each batched GEMM's grid is that tile's over the M, N and batch
    the variant says (M and N apart: the tile is not square); conv1's stride 4 says none and
    launches none (the implicit GEMM runs)."""
    emu = pytest.importorskip("emu.emulator")
    net, conv_op, tile = build("alexnet"), OPS["conv"], Tile(64, 128, 8)
    steps = plan(net, {"conv": variant}, batch=128)
    given = {f"{s.layer.name}/{s.phase}": tile.label for s in steps if s.layer.kind == "conv"}
    geometry = emu.Emulator(tmp_path, execute=False)
    PlanRunner(geometry, net, 128, {"conv": variant}, tiles=given, steps=steps).iteration()
    launched = {
        (r.context.layer.name, r.context.phase): r
        for r in geometry.log
        if r.kernel.startswith("gemm_") and "batched" in r.kernel
    }
    said = {}
    for s in steps:
        if s.layer.kind == "conv":
            gemm = conv_op.variant(variant).gemm(conv_op.case(s.layer, 128), s.phase)
            if gemm is not None:
                said[s.layer.name, s.phase] = gemm
    assert (
        set(launched) == set(said) == {(f"conv{i}", p) for i in range(2, 6) for p in ("fwd", "bwd_data", "bwd_weight")}
    )
    for key, gemm in said.items():
        r = launched[key]
        assert r.kernel == gemm.kernel and r.block[0] == tile.threads, key
        assert r.grid[:2] == (tiles(gemm.N, tile.n), tiles(gemm.M, tile.m) * gemm.batch), (key, gemm)


def torchvision_like() -> Network:
    """torchvision's AlexNet up to conv2 (64 channels in, 192 out at 27 x 27), then a classifier."""
    net = Network("tv", (3, 227, 227), options={})
    net.add("conv1", conv(64, 11, stride=4, pad=2))
    net.add("relu1", ReLU())
    net.add("pool1", maxpool(3, 2))
    net.add("conv2", conv(192, 5, pad=2))
    net.add("relu2", ReLU())
    net.add("fc3", Linear(10))
    net.add("softmax", Softmax())
    return net


def planned(tmp_path, monkeypatch, net: Network, untuned: bool = False, rows: list[dict] = ()) -> Workload:
    """``tracker profile``'s plan (OurKernels.plan) at batch 128 on a made-up GPU whose tuning
    table holds ``rows``."""
    from tracker import tune
    from tracker.gpu import detect

    monkeypatch.setattr(detect, "device_name", lambda: "made-up GPU")
    store = open_store(str(tmp_path / "trace.db"), write=True)
    tune.store(store, list(rows))
    said: list[str] = []
    workload = IMPLEMENTATION.plan(store, Workload.of(net, 128), untuned, said.append)
    store.dispose()
    return workload


def test_the_default_plan_runs_and_records_the_fitted_tiles(tmp_path, monkeypatch):
    """conv2 (192 x 64 channels, winograd_f4 by the rule): its weight gradient's 192 x 64 GEMM runs
    64 x 64 tiles, its forward's 192 x 6,272 and data gradient's 64 x 6,272 64 x 128 tiles; conv1
    (stride 4: the implicit GEMM) keeps the default."""
    workload = planned(tmp_path, monkeypatch, torchvision_like())
    assert {s.layer: s.variant for s in workload.steps if s.layer.startswith("conv")} == {
        "conv1": "shared",
        "conv2": "winograd_f4",
    }
    assert workload.tiles == {
        "conv2/fwd": "64x128x8/ctas2",
        "conv2/bwd_weight": "64x64x8/ctas2",
        "conv2/bwd_data": "64x128x8/ctas2",
    }
    assert planned(tmp_path, monkeypatch, torchvision_like(), untuned=True).tiles == {}


def test_alexnet_at_batch_128_keeps_the_default_tile_everywhere(tmp_path, monkeypatch):
    """This repository's AlexNet (96, 256, 384, 384, 256 channels) gives winograd_f4's batched GEMMs
    M and N that are multiples of 128, or 96 (32 padded by either side): the default fits each."""
    net = build("alexnet")
    workload = planned(tmp_path, monkeypatch, net)
    assert {s.variant for s in workload.steps if s.layer in ("conv2", "conv3", "conv4", "conv5")} == {"winograd_f4"}
    assert workload.tiles == {}
    conv = OPS["conv"]
    sides = {
        (gemm.M, gemm.N)
        for s in workload.steps
        if s.variant == "winograd_f4"
        and (gemm := conv.variant(s.variant).gemm(conv.case(net.layer(s.layer), 128), s.phase))
    }
    assert {side % 128 for pair in sides for side in pair} <= {0, 96}


def test_a_tuned_tile_wins_over_the_fitted_one_and_so_does_a_tuned_default(tmp_path, monkeypatch):
    """The tuning table's fastest at conv2's weight gradient (64 x 128 there) and forward (the default
    tile) run there; the data gradient, never tuned, runs its fitted tile."""
    from datetime import UTC, datetime

    from tracker.tune import shape_key

    net = torchvision_like()
    row = {
        "device_name": "made-up GPU",
        "op": "conv",
        "variant": "winograd_f4",
        "layer": "conv2",
        "shape": shape_key(OPS["conv"].case(net.layer("conv2"), 128)),
        "splits": 1,
        "verified": True,
        "time_ms": 1.0,
        "timer": "events",
        "tracker_version": "test",
        "created_at": datetime.now(UTC),
    }
    rows = [row | {"phase": "bwd_weight", "tile": "64x128x8"}, row | {"phase": "fwd", "tile": DEFAULT.label}]
    workload = planned(tmp_path, monkeypatch, net, rows=rows)
    assert workload.tiles == {"conv2/bwd_weight": "64x128x8", "conv2/bwd_data": "64x128x8/ctas2"}


def test_a_run_of_the_fitted_tiles_is_no_tuned_run():
    """The legend says 'ours, tuned' for a tile the plan does not fit by itself (the U-Net at batch
    1 fits 64-row and 64-column tiles to its 64-channel layers' GEMMs), not for the fitted ones."""
    net = build("unet2d")
    ruled = plan_of(plan(net, {}, batch=1, by_rule=True))
    fit = fitted_tiles(net, ruled, 1)
    assert fit["enc1_conv1/bwd_weight"] == "64x64x8/ctas2"  # its 32 x 3 channels: one 64 x 64 tile
    run = {"network": "unet2d", "network_options": {}, "batch": 1, "plan": ruled, "tuned_variants": {}}
    assert IMPLEMENTATION.legend(run | {"tiles": fit}) == "ours"
    assert IMPLEMENTATION.legend(run | {"tiles": {}}) == "ours"  # --untuned, or a run before fitting
    assert IMPLEMENTATION.legend(run | {"tiles": fit | {"enc1_conv1/fwd": "128x128x8/split4"}}) == "ours, tuned"


def test_tunes_table_says_a_phase_it_never_timed_runs_the_fitted_tile(emulator, tmp_path, monkeypatch):
    """`tracker tune` with its budget spent before the first candidate: its 'runs' column names
    what a profile then runs, the plan's Winograd F(4x4) with the tile fitted to the few channels
    (one 64 x 64 tile), and the implicit GEMM's default tile at conv1's stride 2."""
    from samples import small_net

    from tracker import tune
    from tracker.gpu import runner

    monkeypatch.setattr(runner, "open_cupy_backend", lambda policy: (emulator, {"device_name": "CPU emulation"}))
    rows = tune.run(str(tmp_path / "trace.db"), small_net(), 3, {}, 1, 1, True, lambda line: None, budget_s=1e-9)
    runs = {(r["layer"], r["phase"], r["variant"]): r["runs"] for r in rows if r["layer"].startswith("conv")}
    assert runs[("conv2", "bwd_weight", "winograd_f4")] == "winograd_f4 64x64x8/ctas2"
    assert runs[("conv1", "fwd", "shared")] == f"shared {DEFAULT.label}"
