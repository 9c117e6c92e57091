"""Each analysis against numbers computed by hand from the raw files behind the test store.

No trace of our kernels on a GPU exists yet, so the store is samples.sample_store: the public
Tesla K20c nvprof sample (tests/data/ncu) assigned to AlexNet's first four layers, labelled so,
beside model runs of AlexNet. The figures below come from those files, not from a GPU of ours.
"""

from __future__ import annotations

import statistics

import pytest
from samples import sample_store

from tracker.analysis import caches, fp, reconcile, roofline, runtime, stalls, traffic, utilization
from tracker.model import lookup, predict
from tracker.nets import build
from tracker.profile import profile
from tracker.store import open_store

CONV1 = [7.922282, 7.924363, 7.924203]  # ms, forma_kernel 0 in the GPU trace (3 iterations)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("analysis") / "trace.db")
    sample = sample_store(db)
    model = profile(db, build("alexnet"), 128, backend="model", device=lookup("h100")).run_id
    assert (sample, model) == (1, 2)
    return open_store(db, write=False)


def test_runtime_median_spread_and_unlaunched_layers(store):
    frame = runtime.runtime(store, 1).set_index(["layer", "phase"])
    conv1 = frame.loc[("conv1", "fwd")]
    assert conv1.ms == pytest.approx(statistics.median(CONV1)) and conv1.source == "measured"
    assert conv1.spread_pct == pytest.approx(100 * (max(CONV1) - min(CONV1)) / statistics.median(CONV1))
    assert conv1.repeats == 3 and conv1.launches == 1
    assert frame.loc[("conv2", "fwd")].ms == 0  # nothing launched for it in this store
    whole = runtime.iteration(store, 1)
    assert whole["repeats"] == 3 and whole["source"] == "measured"
    model = runtime.runtime(store, 2)
    assert (model.source == "model").all() and model.ms.sum() == pytest.approx(runtime.iteration(store, 2)["ms"])


def test_stall_categories_and_bound(store):
    shares = stalls.by_category(store, 1)
    relu1 = shares[shares.layer == "relu1"].set_index("category").share
    total = 17.855091 + 23.316966  # forma_kernel 1: exec_dependency, memory_dependency (sync 0)
    assert relu1["memory_dependency"] == pytest.approx(23.316966 / total)
    assert relu1["exec_dependency"] == pytest.approx(17.855091 / total) and relu1["sync"] == 0
    verdict = stalls.bound(store, 1).set_index(["layer", "phase"])
    assert verdict.loc[("relu1", "fwd"), "bound"] == "memory"
    assert verdict.loc[("relu1", "fwd"), "why"] == "top stalls memory_dependency, exec_dependency"
    model = stalls.bound(store, 2).set_index(["layer", "phase"])
    assert model.loc[("conv1", "fwd"), "bound"] == "compute"  # the roofline's verdict, said as such
    assert model.loc[("conv2", "fwd"), "bound"] == "memory"  # the plan's Winograd F(4x4): 17 FLOP/B
    assert model.loc[("relu1", "fwd"), "bound"] == "memory"
    assert model.loc[("relu1", "fwd"), "why"] == "model's roofline (no counters)"


def test_traffic_fp_and_reconciliation(store):
    levels = traffic.by_level(store, 1)
    l1 = levels[(levels.layer == "conv1") & (levels.level == "L1/TEX")].iloc[0]
    assert l1.transactions == 19_998_022  # gld_transactions of forma_kernel 0
    ops = next(p.ops for p in predict(build("alexnet"), 1, phases="fwd") if p.layer == "conv1")
    ratios = reconcile.reconcile(store, 1).set_index(["layer", "phase"])
    assert ratios.loc[("conv1", "fwd"), "flops_ratio"] == pytest.approx(673_384_360 / ops)
    assert ratios.loc[("conv1", "fwd"), "dram_ratio"] != ratios.loc[("conv1", "fwd"), "dram_ratio"]  # NaN: none
    assert reconcile.peak_memory(store, 2).predicted_bytes > 1.7e9
    assert fp.by_kind(store, 1).empty  # nvprof gave only the total flop_count_sp
    assert fp.fp_instructions(store, 1).set_index("layer").loc["conv1", "flops"] == 673_384_360


def test_what_the_sample_lacks_is_empty_not_invented(store):
    assert caches.by_level(store, 1).empty and utilization.pipes(store, 1).empty
    assert roofline.points(store, 1).empty
    assert roofline.peaks(store, 1) == {"flops_per_s": None, "L1": None, "L2": None, "DRAM": None}
    use = utilization.utilization(store, 1).set_index("layer")
    assert use.loc["conv1", "achieved_occupancy"] == pytest.approx(85.0643)


def test_metric_deltas_of_a_run_against_itself(store):
    from tracker.analysis.speedup import metric_deltas

    deltas = metric_deltas(store, 1, 1).set_index(["layer", "phase"])
    relu1 = deltas.loc[("relu1", "fwd")]
    assert relu1.first_reason_a == relu1.first_reason_b == "memory_dependency"
    assert relu1.first_share_change == 0 and relu1.first_share_a == pytest.approx(23.316966 / (17.855091 + 23.316966))
    assert list(deltas.index.get_level_values("layer")) == ["conv1", "relu1", "lrn1", "pool1"]
    assert metric_deltas(store, 1, 2).empty  # the model run has no counters
