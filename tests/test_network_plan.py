"""The runner's plan (no GPU): order, variants, fusion; and a whole training step of a small
AlexNet-like network on the CPU emulation against the NumPy reference."""

import pytest
from samples import small_net
from step_check import step_errors

from tracker.errors import TrackerError
from tracker.gpu.network import FUSED_INTO, PlanRunner, check_indexing, plan, resolve
from tracker.nets import build


def test_plan_order_and_phases():
    steps = plan(build("alexnet"), {})
    names = [(s.layer.name, s.phase) for s in steps]
    assert names[:2] == [("conv1", "fwd"), ("relu1", "fwd")] and names[20] == ("softmax", "fwd")
    assert names[21:24] == [("softmax", "bwd_data"), ("fc8", "bwd_weight"), ("fc8", "bwd_data")]
    assert names[-1] == ("conv1", "bwd_weight")  # the first layer has no bwd_data
    assert len(steps) == 49  # one step per predicted layer phase
    assert [s.phase for s in plan(build("alexnet"), {}, "fwd")] == ["fwd"] * 21


def test_variant_resolution_and_fusion():
    net = build("alexnet")
    variants = resolve(net, {"conv": "fused", "linear": "fused", "lrn": "global"})
    assert variants["conv1"] == "fused" and variants["relu1"] == FUSED_INTO
    assert variants["fc7"] == "fused" and variants["relu7"] == FUSED_INTO
    assert variants["fc8"] == "shared"  # softmax follows: nothing to fuse
    assert variants["lrn1"] == "global" and variants["pool1"] == "shared"  # the default
    assert resolve(net, {})["conv2"] == "shared"


def test_unknown_variants_never_reach_a_launch():
    """--variant is checked by the CLI; an API or workload caller reaches the plan and the
    op registry directly, and both refuse a name the registry does not know."""
    from tracker.errors import UnknownName
    from tracker.ops import OPS
    from tracker.ops.launch import Arrays

    with pytest.raises(UnknownName, match=r"unknown relu variant 'banana'; known: global"):
        resolve(build("alexnet"), {"relu": "banana"})
    with pytest.raises(UnknownName, match=r"unknown op 'convolution'"):
        resolve(build("alexnet"), {"convolution": "shared"})
    launched = []
    backend = type("Recorder", (), {"launch": lambda self, *a, **k: launched.append(a)})()
    with pytest.raises(UnknownName, match=r"unknown linear variant 'banana'; known: global, shared, fused"):
        OPS["linear"].launch(backend, "banana", "fwd", Arrays())
    assert launched == []


def test_networks_without_kernels_are_refused():
    """A kind some op runs in other dimensions is named with its own; a kind no op runs, alone."""
    from tracker.nets.layers import Module, Network, ReLU, conv

    net = Network("oned", (3, 16), options={})
    net.add("conv1", conv(4, 3, dims=1))
    net.add("relu1", ReLU())
    net.add("mystery", Module("Mystery", (4, 14)))
    with pytest.raises(TrackerError, match=r"^oned has layers with no kernels yet: conv \(1-D\), mystery$"):
        resolve(net, {})


@pytest.mark.parametrize(
    "chosen",
    [
        {},
        {"conv": "fused", "linear": "fused"},
        {"conv": "gemm", "linear": "global", "lrn": "global", "softmax": "global"},
        {"conv": "constant", "maxpool": "shared"},
    ],
)
def test_a_training_step_matches_the_reference(emulator, chosen):
    net = small_net()
    run = PlanRunner(emulator, net, batch=2, chosen=chosen, seed=5)
    run.iteration()
    loss, expected, errors = step_errors(run)
    assert loss == pytest.approx(expected, rel=1e-5)
    assert max(max(pair) for pair in errors.values()) < 1e-4, errors


def test_the_shared_max_pool_keeps_its_maxima_in_arrays_the_memory_model_counts(emulator):
    """The executor allocates each max-pool's saved offsets (int32, its output's shape) where its
    variant saves them, and none for `global`, which finds the maxima again; the memory model
    counts what the default allocates; the forward writes each window's, an offset in its plane."""
    import numpy as np

    from tracker.model import memory
    from tracker.reference import maxpool_indices

    net = small_net()
    assert PlanRunner(emulator, net, batch=2, chosen={"maxpool": "global"}).t.argmax == {}
    run = PlanRunner(emulator, net, batch=2, chosen={}, seed=5)
    (argmax,) = run.t.argmax.values()
    assert run.t.of(net.layer("pool1")).argmax is argmax
    assert argmax.dtype == np.int32 and argmax.shape == (2, *net.layer("pool1").output_shape)
    assert argmax.nbytes == memory(net, 2).pool_index_bytes
    run.iteration()
    pool_input = emulator.asnumpy(run.t.act["lrn1"])
    np.testing.assert_array_equal(emulator.asnumpy(argmax), maxpool_indices(pool_input, 3, 2))


def test_measure_numbers_launches_and_tags_them_with_their_step(emulator):
    from tracker.gpu.runner import measure

    net = small_net()
    run = PlanRunner(emulator, net, batch=1, chosen={"conv": "fused", "linear": "shared"})
    rows, totals = measure(run, repeat=2, warmup=1, policy="cg", echo=lambda line: None)
    assert [r.invocation for r in rows] == list(range(len(rows)))
    assert {r.repeat for r in rows} == {0, 1} and len(totals) == 2
    per_repeat = [(r.layer_id, r.phase, r.kernel_name) for r in rows if r.repeat == 0]
    assert per_repeat == [(r.layer_id, r.phase, r.kernel_name) for r in rows if r.repeat == 1]
    steps = {(s.layer.id, s.phase) for s in run.steps if s.variant != "fused-into-previous"}
    assert {(layer, phase) for layer, phase, _ in per_repeat} == steps  # every planned phase launched
    relu1 = net.layer("relu1").id
    assert not any(r.layer_id == relu1 for r in rows)  # fused into conv1
    assert {r.l1_policy for r in rows} == {"cg"}
    assert [k for layer, phase, k in per_repeat if (layer, phase) == (1, "fwd")] == ["conv2d_fwd_implicit"]


def test_a_batch_past_32_bit_indexing_is_refused_before_anything_is_allocated(emulator):
    alexnet = build("alexnet")  # conv1's output, 96 x 55 x 55 = 290,400 floats an image, is the largest
    check_indexing(alexnet, 7394)  # 2,147,217,600 elements: the kernels' int indices still reach them
    with pytest.raises(TrackerError, match=r"batch 7395 gives conv1 2,147,508,000 elements; .* batch 7394 at most"):
        PlanRunner(emulator, alexnet, 7395, {})  # (allocating first would take 8.6 GB of NaNs)
