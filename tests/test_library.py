"""The library arm's PyTorch build of a tracker network, on the CPU (PyTorch's CPU wheel, the
`torch` extra): one training step equals the NumPy reference, forward and backward, and runs
its layer phases in our plan's order under our plan's range names."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest
from samples import small_net

from tracker import reference
from tracker.errors import TrackerError
from tracker.nets import build

torch = pytest.importorskip("torch")

from tracker.library.torch_net import TorchStep  # noqa: E402


def test_a_step_equals_the_numpy_reference_forward_and_backward():
    """float64 on the CPU: the loss and every weight and bias gradient, to 1e-10."""
    from tracker.gpu.network import initial_parameters

    net, batch = small_net(), 3
    step = TorchStep(net, batch, dtype=torch.float64)
    step.iteration()
    x, labels = step.x.numpy(), step.labels.numpy()
    loss, grads = reference.network_step(net, initial_parameters(net, 0), x, labels)
    assert float(step.loss.detach()) == pytest.approx(loss, rel=1e-12)
    assert set(step.grads) == set(grads) == {"conv1", "conv2", "fc3", "fc4"}
    for name, (dw, db) in grads.items():
        got_dw, got_db = (g.numpy() for g in step.grads[name])
        assert np.linalg.norm(got_dw - dw) / np.linalg.norm(dw) < 1e-10, name
        assert np.linalg.norm(got_db - db) / np.linalg.norm(db) < 1e-10, name


def test_its_ranges_are_our_plans_names_in_our_plans_order():
    from tracker.gpu.network import plan

    opened: list[str] = []

    def region(name):
        opened.append(name)
        return nullcontext()

    net = build("alexnet")
    TorchStep(net, 1, region=region).iteration()
    assert opened == [f"{s.layer.name}/{s.phase}" for s in plan(net, {})]
    assert opened[:2] == ["conv1/fwd", "relu1/fwd"] and opened[21:24] == [
        "softmax/bwd_data",
        "fc8/bwd_weight",
        "fc8/bwd_data",
    ]
    assert opened[-1] == "conv1/bwd_weight"  # nothing upstream of conv1 needs a gradient
    with_fwd_only: list[str] = []
    TorchStep(net, 1, phases="fwd", region=lambda n: with_fwd_only.append(n) or nullcontext()).iteration()
    assert with_fwd_only == [f"{layer.name}/fwd" for layer in net.layers]


def test_a_network_without_a_loss_layer_is_refused_in_one_line():
    from tracker.nets import Network
    from tracker.nets.layers import ReLU

    net = Network("headless", (3, 8, 8), options={})
    net.add("relu1", ReLU())
    with pytest.raises(TrackerError, match=r"^headless does not end in softmax or sigmoid"):
        TorchStep(net, 1)


def small_unet(dims: int = 2):
    return build(f"unet{dims}d", input_size="8", in_channels=1, base_filters=2, depth=2, classes=2)


@pytest.mark.parametrize("dims", [2, 3])
def test_a_unet_step_equals_the_numpy_reference_forward_and_backward(dims):
    """The skips (concat: two inputs; the encoder's activation read twice, its gradient summed),
    nearest up-sampling and the sigmoid with binary cross-entropy (2-D); 3-D convolutions without
    a bias, batch norm, 3-D pools, transposed convolutions and softmax (3-D): float64, to 1e-10."""
    from tracker.gpu.network import initial_parameters

    net = small_unet(dims)
    step = TorchStep(net, 2, dtype=torch.float64)
    step.iteration()
    loss, grads = reference.network_step(net, initial_parameters(net, 0), step.x.numpy(), step.labels.numpy())
    assert float(step.loss.detach()) == pytest.approx(loss, rel=1e-12)
    assert set(step.grads) == set(grads) == {layer.name for layer in net.layers if layer.op.weighted()}
    for name, (dw, db) in grads.items():
        got_dw, got_db = step.grads[name]
        assert np.linalg.norm(got_dw.numpy() - dw) / np.linalg.norm(dw) < 1e-10, name
        assert (got_db is None) == (db is None), name
        if db is not None:
            assert np.linalg.norm(got_db.numpy() - db) / np.linalg.norm(db) < 1e-10, name


def test_a_3d_unet_runs_every_layer_phase_in_our_order_with_batch_statistics():
    """3-D convolutions and pools, batch norm in training mode, transposed convolutions: every
    layer phase in training order under its range, every learned layer's gradients, and the
    running statistics moved by the step."""
    opened: list[str] = []
    net = small_unet(3)
    step = TorchStep(net, 2, region=lambda name: opened.append(name) or nullcontext())
    step.iteration()
    assert opened == [f"{layer.name}/{phase}" for layer, phase in net.training_order()]
    learned = {layer.name: layer for layer in net.layers if layer.op.has_weights}
    assert {layer.kind for layer in learned.values()} == {"conv", "batchnorm", "convtranspose"}
    assert set(step.grads) == set(learned)
    for name, (dw, db) in step.grads.items():
        layer = learned[name]
        assert tuple(dw.shape) == layer.op.weight_shape(list(layer.input_shapes)), name
        assert torch.isfinite(dw).all() and dw.abs().sum() > 0, name
        assert (db is None) == (layer.op.biases() == 0 and layer.kind == "conv"), (
            name
        )  # a conv before batch norm has none
    mean, var = step.running["enc1_bn1"]
    assert mean.abs().sum() > 0 and not torch.equal(var, torch.ones_like(var))


def test_backward_nodes_open_their_layer_phases_range_where_they_run():
    """On a GPU the autograd engine runs backward nodes on its device thread, where the caller's
    ranges are not: each node opens its layer phase's range itself. Forced on here (the CPU runs
    nodes on the caller's thread): every backward phase's range is opened by the caller and by its
    nodes, no forward range by a node, and every range is closed."""
    import threading
    from contextlib import contextmanager

    events = []

    @contextmanager
    def recorded(name):
        events.append(("open", name, threading.get_ident()))
        yield
        events.append(("close", name, threading.get_ident()))

    net = small_net()
    step = TorchStep(net, 2, region=recorded)
    step.on_engine_threads = True
    step.iteration()
    opened = [name for kind, name, _ in events if kind == "open"]
    backward = [f"{layer.name}/{phase}" for layer, phase in net.training_order() if phase != "fwd"]
    assert all(opened.count(name) >= 2 for name in backward), opened
    assert all(opened.count(f"{layer.name}/fwd") == 1 for layer in net.layers)
    depth = 0
    for kind, _, _ in events:
        depth += 1 if kind == "open" else -1
        assert depth >= 0
    assert depth == 0
