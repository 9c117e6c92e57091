"""Experiments and compare, end to end through tracker profile's events path.

No GPU here: the events pass runs our kernels on the CPU emulation of CUDA (tests/emu), which
gives real launch logs (kernel names, fusion: a fused ReLU launches nothing) but no times. The
times are made up (tests/made_up_times.py, through conftest's ``emulated_events``), by a rule the
assertions recompute: they test the arithmetic and the bookkeeping (speedups, spreads, noise,
pairs), never a GPU's behaviour.
"""

from __future__ import annotations

import statistics

import pandas as pd
import pytest
from samples import tiny_net

import tracker.experiment
import tracker.profile
from tracker.analysis import experiments, runtime, speedup
from tracker.errors import Mismatch, TrackerError
from tracker.experiment import arms, run_experiment
from tracker.gpu.runner import Measured
from tracker.ops import OPS
from tracker.profile import Choice
from tracker.store import launch_rows, open_store


def test_l1_bypass_pairs_every_variant_and_computes_speedups(tmp_path, emulated_events):
    # SQLite only: 12 emulated runs take a while; the fusion and compare tests cover PostgreSQL
    db = str(tmp_path / "trace.db")
    experiment_id = run_experiment(db, "l1-bypass", tiny_net(), 1, repeat=2, warmup=0)
    store = open_store(db, write=False)
    table = experiments.runs(store, experiment_id)
    staged = [
        name
        for name in OPS.variant_names()
        if any(  # where ca copies with cp.async what cg stages
            launch.tunable for op in OPS if name in op.variants for launch in op.variants[name].launches.values()
        )
    ]
    assert staged == ["shared", "gemm", "fused", "winograd", "winograd_f4", "fft"]
    assert list(table.arm) == [a.label for a in arms("l1-bypass", 1)]
    assert len(table) == 2 * len(OPS.variant_names()) + len(staged)
    assert table.groupby("comparison")["baseline"].sum().eq(1).all()
    assert set(table[table.arm == "shared ca staged"].loaders) == {"staged"}
    assert list(table.loaders[:3]) == ["async", "staged", "async"]  # global ca, global cg, constant ca
    assert {
        row["l1_policy"] for row in launch_rows(store, int(table[table.arm == "shared ca staged"].run_id.iloc[0]))
    } == {"ca-staged"}
    result = experiments.results(store, experiment_id, "l1-bypass")
    cg = result[(result.arm == "shared cg") & (result.layer == "conv1") & (result.phase == "fwd")].iloc[0]
    staged = result[(result.arm == "shared ca staged") & (result.layer == "conv1") & (result.phase == "fwd")].iloc[0]
    assert cg.l1_speedup == pytest.approx(staged.b_ms / cg.b_ms) and pd.isna(staged.l1_speedup)
    assert result[result.arm == "global cg"].l1_speedup.isna().all()  # no staged arm: nothing to isolate
    result = experiments.speedups(store, experiment_id)
    shared = result[(result.comparison == "shared") & (result.layer == "conv1") & (result.phase == "fwd")].iloc[0]
    assert shared.speedup == pytest.approx(1 / 0.9)  # made_up_ms: conv under cg is 10 % faster
    assert shared.noise is False  # 11 % apart, 1 % spread
    relu = result[(result.comparison == "shared") & (result.layer == "relu1") & (result.phase == "fwd")].iloc[0]
    assert relu.speedup == pytest.approx(1 / 1.005) and relu.noise is True  # 0.5 % apart: within the spread
    whole = result[(result.comparison == "shared") & (result.layer == "iteration")].iloc[0]
    per_repeat = {}
    for row in launch_rows(store, int(table.run_id[4])):  # shared ca, from the launch table itself
        per_repeat[row["repeat"]] = per_repeat.get(row["repeat"], 0) + row["time_ms"]
    assert whole.a_ms == pytest.approx(statistics.median(per_repeat.values()))
    assert whole.spread_pct_a == pytest.approx(
        100 * (max(per_repeat.values()) - min(per_repeat.values())) / statistics.median(per_repeat.values())
    )


def test_fusion_pairs_each_relu_with_its_producer(db, emulated_events):
    experiment_id = run_experiment(db, "fusion", tiny_net(), 1, repeat=3, warmup=0)
    store = open_store(db, write=False)
    pairs = experiments.fused_pairs(store, experiment_id)
    assert set(zip(pairs.layer, pairs.relu)) == {("conv1", "relu1"), ("conv2", "relu2"), ("fc3", "relu3")}
    conv2 = pairs[(pairs.layer == "conv2") & (pairs.phase == "fwd")].iloc[0]
    # separate: conv2 (ID 5) 0.5 + relu2 (ID 6) 0.6 ms; fused: 0.5 + 0.05 * 6 = 0.8 ms (median: jitter 1.00)
    assert conv2.separate_ms == pytest.approx(1.1) and conv2.fused_ms == pytest.approx(0.8)
    assert conv2.speedup == pytest.approx(1.1 / 0.8) and conv2.noise is False
    assert conv2.model_relu_bytes > 0 and conv2.dram_bytes_saved is None  # events: no counters
    table = experiments.results(store, experiment_id, "fusion")
    assert table.layer.iloc[-1] == "iteration" and table.speedup.iloc[-1] > 1


def test_compare_refuses_runs_that_do_not_match(db, emulated_events):
    from tracker.model import lookup
    from tracker.nets import build
    from tracker.profile import profile

    small = profile(db, tiny_net(), 1, repeat=2, warmup=0).run_id
    small_model = profile(db, tiny_net(), 1, backend="model", device=lookup("h100")).run_id
    alexnet = profile(db, build("alexnet"), 4, backend="model", device=lookup("h100")).run_id
    alexnet_fwd = profile(db, build("alexnet"), 4, backend="model", device=lookup("h100"), phases="fwd").run_id
    no_device = profile(db, build("alexnet"), 4, backend="model").run_id
    store = open_store(db, write=False)
    with pytest.raises(Mismatch, match=r"layer 7 is fc3 \(linear\) in run 1 but lrn2 \(lrn\) in run 3"):
        speedup.compare(store, small, alexnet)
    with pytest.raises(Mismatch, match="ran different phases"):
        speedup.compare(store, alexnet, alexnet_fwd)
    with pytest.raises(Mismatch, match="run 5 has no times"):
        speedup.compare(store, alexnet, no_device)
    with pytest.raises(Mismatch, match="run 1 is measured and run 2 is the model's prediction"):
        speedup.compare(store, small, small_model)
    with pytest.raises(Mismatch, match="run 1 compared with itself: name two different runs"):
        speedup.compare(store, small, small)


def test_runs_at_two_batch_sizes_compare_per_image(db):
    from tracker.model import lookup
    from tracker.nets import build
    from tracker.profile import profile

    b16, b128 = (profile(db, build("alexnet"), b, backend="model", device=lookup("h100")).run_id for b in (16, 128))
    store = open_store(db, write=False)
    both = speedup.comparison(store, b16, b128)
    assert set(both["basis"]) == {"per image"}
    whole = both[both["layer"] == "iteration"].iloc[0]
    totals = [runtime.iteration(store, run)["ms"] for run in (b16, b128)]
    assert whole["a_ms"] == pytest.approx(totals[0] / 16) and whole["b_ms"] == pytest.approx(totals[1] / 128)
    assert whole["speedup"] == pytest.approx((totals[0] / 16) / (totals[1] / 128))
    assert speedup.basis(store, b16, b128) == "per image"


def test_model_backend_refuses_what_it_cannot_answer(tmp_path):
    db = str(tmp_path / "trace.db")
    with pytest.raises(TrackerError, match="experiment fusion needs a GPU backend"):
        run_experiment(db, "fusion", tiny_net(), 1, backend="model")
    with pytest.raises(TrackerError, match="needs --device"):
        run_experiment(db, "batch", tiny_net(), 1, batches=(1, 2), backend="model")
    assert not (tmp_path / "trace.db").exists()  # refused before the database was opened


def test_an_interrupted_experiment_keeps_its_finished_runs_and_is_marked(tmp_path, emulated_events, monkeypatch):
    import tracker.gpu.runner as runner

    measured = runner.profile_events
    calls = []

    def interrupted_second(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return measured(*args)

    monkeypatch.setattr(runner, "profile_events", interrupted_second)
    db = str(tmp_path / "trace.db")
    with pytest.raises(KeyboardInterrupt):
        run_experiment(db, "fusion", tiny_net(), 1, repeat=1, warmup=0)
    store = open_store(db, write=False)
    from tracker.store import find_experiment, list_runs

    assert find_experiment(store, "e1").status == "interrupted"
    assert [r["status"] for r in list_runs(store)] == ["complete", "interrupted"]
    arms = experiments.runs(store, 1)
    assert list(arms.arm) == ["separate", "fused"]  # the finished run and the interrupted one, both linked
    assert list(arms.status) == ["complete", "interrupted"]
    assert experiments.speedups(store, 1).empty  # nothing complete to compare the baseline with


def test_restricted_counters_fall_back_to_events_only_when_the_backend_was_chosen(
    tmp_path, emulated_events, monkeypatch
):
    """--backend auto picks ncu where it is found; counters restricted to administrators then fall
    back to events, for profile and for every arm of an experiment (the first arm finds out, the
    rest follow it). --backend ncu, asked for by name, fails instead."""
    from tracker.errors import BackendUnavailable
    from tracker.profile import profile

    attempts = []

    class Restricted:
        name, version = "ncu", "2025.3.1.0"

        def collect(self, *args, **kwargs):
            attempts.append(1)
            raise BackendUnavailable("ncu cannot read counters: ERR_NVGPUCTRPERM")

    def choose_backend(requested, options=None, implementations=()):
        if requested == "auto":
            return Choice("ncu", "test: ncu found", Restricted())
        return Choice(requested, "asked for by name", Restricted() if requested == "ncu" else None)

    import tracker.gpu.runner as runner

    emulated = runner.profile_events

    def with_a_compute_capability(*args):  # pass 2 asks which metrics this GPU has
        measured = emulated(*args)
        return Measured(measured.launches, {**measured.device, "compute_capability": "9.0"}, 0)

    monkeypatch.setattr(runner, "profile_events", with_a_compute_capability)
    monkeypatch.setattr(tracker.profile, "choose_backend", choose_backend)
    monkeypatch.setattr(tracker.experiment, "choose_backend", choose_backend)
    db = str(tmp_path / "trace.db")
    run_experiment(db, "fusion", tiny_net(), 1, backend="auto", repeat=1, warmup=0)
    store = open_store(db, write=False)
    arms_run = experiments.runs(store, 1)
    assert list(arms_run.backend) == ["events", "events"] and len(attempts) == 1
    with pytest.raises(BackendUnavailable, match="ERR_NVGPUCTRPERM"):
        profile(db, tiny_net(), 1, backend="ncu", repeat=1, warmup=0)


def test_a_profile_runs_and_records_the_tiles_tune_found(tmp_path, emulator, emulated_events, monkeypatch):
    """A tuned profile runs the stored tile of the plan's variant (the conv rule's Winograd F(4x4) at
    conv1's 3x3) and says so in its run row, beside the tiles the plan fits to the other Winograd
    phases' GEMMs (a few channels: one 64 x 64 tile); --untuned runs the defaults: the implicit GEMM."""
    from tracker import tune
    from tracker.gpu import detect
    from tracker.ops.gemm import Tile
    from tracker.store.schema import Run

    gpu, net, db = "CPU emulation (tests/emu)", tiny_net(), str(tmp_path / "trace.db")
    monkeypatch.setattr(detect, "device_name", lambda: gpu)
    target = next(
        t for t in tune.targets(net, 1, {}) if (t.layer, t.phase) == ("conv1", "fwd") and t.variant == t.planned
    )
    assert target.variant == "winograd_f4"
    store = open_store(db, write=True)
    tune.store(store, tune.search(emulator, [target], (Tile(64, 64, 8, split=2),), 1, gpu, refine=False))
    store.dispose()

    tuned = tracker.profile.profile(db, net, 1, backend="events", repeat=1, warmup=0).run_id
    untuned = tracker.profile.profile(db, net, 1, backend="events", repeat=1, warmup=0, untuned=True).run_id
    store = open_store(db, write=False)
    with store.session() as session:
        fitted = {
            key: "64x64x8/ctas2" for key in ("conv1/bwd_weight", "conv2/fwd", "conv2/bwd_data", "conv2/bwd_weight")
        }
        assert session.get(Run, tuned).tiles == {"conv1/fwd": "64x64x8/split2", **fitted}
        assert session.get(Run, untuned).tiles == {}
    conv1 = net.layers[0].id
    threads = {
        run: {
            (row["kernel_name"], row["block_x"])
            for row in launch_rows(store, run)
            if (row["layer_id"], row["phase"]) == (conv1, "fwd")
        }
        for run in (tuned, untuned)
    }
    store.dispose()
    assert ("gemm_nn_batched", 64) in threads[tuned]  # the tuned tile's 64 threads (K = 3: one k-tile, no split)
    assert threads[untuned] == {("conv2d_fwd_implicit", 256)}


def test_a_profile_runs_the_variant_tune_found_fastest_and_records_it(tmp_path, emulator, emulated_events, monkeypatch):
    """Where `tracker tune` stored a faster verified variant for a layer phase
    (here Winograd F(2x2) at conv1's forward, beating the plan's F(4x4), the search's own rows,
    verified on the emulation, with made-up times: the emulation's wall-clock says nothing of a
    GPU), the profile runs it there, the layer's other phases as planned, and records the choice;
    --untuned runs each op's default."""
    from tracker import tune
    from tracker.gpu import detect
    from tracker.ops.gemm import DEFAULT
    from tracker.store.schema import Run

    gpu, net, db = "CPU emulation (tests/emu)", tiny_net(), str(tmp_path / "trace.db")
    monkeypatch.setattr(detect, "device_name", lambda: gpu)
    raced = [t for t in tune.targets(net, 1, {}) if (t.layer, t.phase) == ("conv1", "fwd")]
    assert [t.variant for t in raced] == [
        "winograd_f4",  # the plan's (the conv rule's), then its rivals
        "global",
        "constant",
        "shared",
        "gemm",
        "winograd",
        "fft",
    ]
    raced = [t for t in raced if t.variant in ("winograd_f4", "shared", "winograd")]
    rows = tune.search(emulator, raced, (DEFAULT,), 1, gpu, refine=False)
    assert [(r["variant"], r["verified"]) for r in rows] == [
        ("winograd_f4", True),
        ("shared", True),
        ("winograd", True),
    ]
    store = open_store(db, write=True)
    times = {"winograd_f4": 1.5, "shared": 2.0, "winograd": 1.0}
    tune.store(store, [r | {"time_ms": times[r["variant"]]} for r in rows])
    store.dispose()

    said: list[str] = []
    tuned = tracker.profile.profile(db, net, 1, backend="events", repeat=1, warmup=0, echo=said.append).run_id
    untuned = tracker.profile.profile(db, net, 1, backend="events", repeat=1, warmup=0, untuned=True).run_id
    assert (
        "tuned variants for CPU emulation (tests/emu) (1 layer phases; --untuned runs each op's default): "
        "conv1/fwd winograd" in said
    )
    store = open_store(db, write=False)
    with store.session() as session:
        fitted = {
            key: "64x64x8/ctas2" for key in ("conv1/bwd_weight", "conv2/fwd", "conv2/bwd_data", "conv2/bwd_weight")
        }
        assert [(session.get(Run, r).tuned_variants, session.get(Run, r).tiles) for r in (tuned, untuned)] == [
            ({"conv1/fwd": "winograd"}, fitted),  # conv1/fwd: the default tile won the race, so it runs
            ({}, {}),
        ]
    conv1 = net.layers[0].id
    ran = {
        run: {(row["phase"], row["variant"]) for row in launch_rows(store, run) if row["layer_id"] == conv1}
        for run in (tuned, untuned)
    }
    kernels = {
        row["kernel_name"] for row in launch_rows(store, tuned) if (row["layer_id"], row["phase"]) == (conv1, "fwd")
    }
    store.dispose()
    assert ran == {
        tuned: {("fwd", "winograd"), ("bwd_weight", "winograd_f4")},
        untuned: {("fwd", "shared"), ("bwd_weight", "shared")},
    }
    assert {"winograd_input_a4", "gemm_nn_batched", "winograd_output_a4"} <= kernels
