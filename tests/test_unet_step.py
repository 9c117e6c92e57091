"""A U-Net's training step through our kernels on the CPU emulation, against the float64 reference:
concatenated skips, whose encoder activation has two readers and so a gradient summed
from both (the accumulate op, in that activation's first backward phase), nearest up-sampling,
and the sigmoid with binary cross-entropy as the loss."""

from __future__ import annotations

import re

import pytest
from step_check import step_errors

from tracker.errors import TrackerError
from tracker.gpu.network import FUSED_INTO, PlanRunner, readers, resolve
from tracker.nets import build


def small_unet():
    """Two levels, two filters at the top: every layer kind of unet2d at 8 x 8."""
    return build("unet2d", input_size="8", in_channels=1, base_filters=2, depth=2, classes=2)


@pytest.mark.parametrize(
    "chosen",
    [{}, {"concat": "shared", "upsample": "shared", "sigmoid": "shared"}, {"conv": "fused", "maxpool": "global"}],
)
def test_a_small_unet_training_step_matches_the_reference(emulator, chosen):
    run = PlanRunner(emulator, small_unet(), batch=2, chosen=chosen, seed=3)
    run.iteration()
    loss, expected, errors = step_errors(run)
    assert loss == pytest.approx(expected, rel=1e-5)
    assert max(max(pair) for pair in errors.values()) < 1e-4, errors
    assert set(errors) == {layer.name for layer in run.net.layers if layer.kind == "conv"}


def test_a_skip_is_read_twice_and_its_gradient_summed_in_its_first_backward_phase(emulator):
    from tracker.gpu.runner import measure

    net = small_unet()
    assert [layer.name for layer in readers(net)["enc1_relu2"]] == ["pool1", "concat1"]
    run = PlanRunner(emulator, net, batch=1, chosen={})
    rows, _ = measure(run, repeat=1, warmup=0, policy="ca", echo=lambda line: None)
    by_phase: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        by_phase.setdefault((net.layers[r.layer_id - 1].name, r.phase), []).append(r.kernel_name)
    for level in (1, 2):
        assert by_phase[(f"enc{level}_relu2", "bwd_data")] == ["grad_accumulate", "relu_bwd_global"]
    assert sum(kernels.count("grad_accumulate") for kernels in by_phase.values()) == 2  # one per skip


@pytest.mark.parametrize(
    "name, chosen",
    [
        ("unet2d", {"concat": "inplace"}),
        ("unet2d", {"concat": "inplace", "conv": "fused"}),
        ("unet3d", {"concat": "inplace"}),
    ],
)
def test_concatenation_in_place_at_batch_1_copies_nothing_and_matches(emulator, name, chosen):
    """Producers write their slices of the joined tensor (a fused conv its ReLU's), the joined
    gradient's slices are its inputs' gradients (the skip's added by the accumulate op), and no
    concat kernel runs; the step equals the reference. At batch 2 a slice is no contiguous array:
    the copy runs."""
    from tracker.gpu.network import IN_PLACE, storage

    options = {"input_size": "8", "in_channels": 1, "base_filters": 2, "depth": 2, "classes": 2}
    net = build(name, **options)
    variants = resolve(net, chosen, batch=1)
    joins = [layer for layer in net.layers if layer.kind == "concat"]
    assert {variants[layer.name] for layer in joins} == {IN_PLACE}
    assert {resolve(net, chosen, batch=2)[layer.name] for layer in joins} == {"global"}
    emulator.log.clear()
    run = PlanRunner(emulator, net, batch=1, chosen=chosen, seed=6)
    run.iteration()
    assert not [r for r in emulator.log if r.kernel.startswith("concat")]
    for layer in joins:  # each input's array is its slice of the joined one: the same memory
        joined = run.t.act[layer.name]
        for name in layer.inputs:
            run.t.act[storage(net, name, variants)].fill(7.0)
        assert (run.b.asnumpy(joined) == 7.0).all()
    run = PlanRunner(emulator, net, batch=1, chosen=chosen, seed=6)
    run.iteration()
    loss, expected, errors = step_errors(run)
    assert loss == pytest.approx(expected, rel=1e-5)
    assert max(max(pair) for pair in errors.values()) < 1e-4, errors


def test_a_fused_conv_does_not_absorb_a_relu_whose_output_two_layers_read():
    variants = resolve(small_unet(), {"conv": "fused"})
    assert variants["enc1_relu1"] == variants["dec1_relu2"] == FUSED_INTO  # read once: absorbed
    assert variants["enc1_relu2"] != FUSED_INTO and variants["enc1_conv2"] != "fused"  # the skip: not


@pytest.mark.parametrize("name, options, missing", [("unet2d", {"conv_type": "separable"}, "conv (grouped)")])
def test_what_the_kernels_cannot_run_is_named(name, options, missing):
    with pytest.raises(TrackerError, match=rf"^{name} has layers with no kernels yet: {re.escape(missing)}$"):
        resolve(build(name, **options), {})


@pytest.mark.parametrize(
    "chosen",
    [
        {},
        {
            "conv3d": "global",
            "maxpool3d": "global",
            "convtranspose3d": "global",
            "batchnorm": "global",
            "concat": "global",
        },
    ],
)
def test_a_small_3d_unet_training_step_matches_the_reference(emulator, chosen):
    """Every layer of unet3d on our kernels: 3-D convolutions without a bias, batch norm, 3-D
    pools, transposed convolutions up, the skips' concatenation, and softmax's cross-entropy."""
    import numpy as np

    net = build("unet3d", input_size="8", in_channels=1, base_filters=2, depth=2, classes=2)
    assert resolve(net, chosen)  # nothing refused
    run = PlanRunner(emulator, net, batch=2, chosen=chosen, seed=4)
    run.iteration()
    loss, expected, errors = step_errors(run)
    assert loss == pytest.approx(expected, rel=1e-5)
    assert set(errors) == {layer.name for layer in net.layers if layer.op.weighted()}
    assert max(max(pair) for pair in errors.values()) < 1e-4, errors
    assert all(
        run.t.param_grads[layer.name][1] is None
        for layer in net.layers
        if layer.kind == "conv" and layer.name != "out_conv"
    )  # no bias, so no bias gradient
    assert np.isfinite(run.b.asnumpy(run.t.statistics["enc1_bn1"][3])).all()


def batchnorm_net():
    """conv -> batch norm -> ReLU blocks, as the 3-D U-Net's, in 2-D (our convolutions' dimension)."""
    from tracker.nets.layers import BatchNorm, Linear, Network, ReLU, Softmax, conv, maxpool

    net = Network("bn", (3, 9, 9), options={})
    net.add("conv1", conv(8, 3, pad=1))
    net.add("bn1", BatchNorm())
    net.add("relu1", ReLU())
    net.add("pool1", maxpool(2, 2))
    net.add("conv2", conv(6, 3, pad=1))
    net.add("bn2", BatchNorm())
    net.add("relu2", ReLU())
    net.add("fc3", Linear(10))
    net.add("softmax", Softmax())
    return net


@pytest.mark.parametrize("variant", ["global", "shared"])
def test_a_training_step_with_batch_norm_matches_the_reference(emulator, variant):
    """Batch statistics forward, the scale's and shift's gradients and the data gradient through
    them; the running statistics moved as PyTorch moves them."""
    import numpy as np

    from tracker import reference

    run = PlanRunner(emulator, batchnorm_net(), batch=3, chosen={"batchnorm": variant}, seed=2)
    run.iteration()
    loss, expected, errors = step_errors(run)
    assert loss == pytest.approx(expected, rel=1e-5)
    assert set(errors) == {"conv1", "bn1", "conv2", "bn2", "fc3"}
    # a bias before batch norm has no gradient (the batch's mean takes it away): the reference's is
    # rounding, so the relative error of conv1's and conv2's db says nothing; their size does
    assert max(e for name, (dw, db) in errors.items() for e in ((dw,) if name.startswith("conv") else (dw, db))) < 1e-4
    for name in ("conv1", "conv2"):
        assert np.abs(emulator.asnumpy(run.t.param_grads[name][1])).max() < 1e-6, name
    conv1 = emulator.asnumpy(run.t.act["conv1"]).astype(np.float64)
    _, mean, var = reference.batchnorm_fwd(conv1, *(np.ones(8), np.zeros(8)))
    m = conv1.size // 8
    running_mean, running_var = (emulator.asnumpy(a) for a in run.t.statistics["bn1"][2:])
    assert np.allclose(running_mean, 0.1 * mean, rtol=1e-4, atol=1e-6)
    assert np.allclose(running_var, 0.9 + 0.1 * var * m / (m - 1), rtol=1e-4)


def test_a_concat_of_three_inputs_is_named_not_run():
    from tracker.nets.layers import Concat, Network, ReLU, Sigmoid

    net = Network("three", (2, 4, 4), options={})
    for name in ("a", "b", "c"):
        net.add(name, ReLU(), "input")
    net.add("cat", Concat(), "a", "b", "c")
    net.add("sigmoid", Sigmoid())
    with pytest.raises(TrackerError, match=r"^three has layers with no kernels yet: concat \(3 inputs\)$"):
        resolve(net, {})
