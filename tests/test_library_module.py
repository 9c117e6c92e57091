"""`tracker profile --torch MODULE:FUNCTION`: a user's own PyTorch model, each leaf-module call a
layer, on the CPU (PyTorch's CPU wheel): the layers and their FLOPs, the replayed step's ranges
as PyTorch's profiler records them, the model backend end to end, and bad input in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracker.cli import cli
from tracker.errors import TrackerError
from tracker.store import find_run, layer_rows, open_store, run_dict

torch = pytest.importorskip("torch")

from tracker.library.torch_module import ModuleStep, network  # noqa: E402

SPEC = "torch_models:residual_cnn"  # tests/torch_models.py


@pytest.fixture(autouse=True)
def models_on_the_path(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))


def test_every_leaf_module_call_is_a_layer_named_by_its_path_and_call():
    net = network(SPEC)
    assert [(layer.name, layer.kind) for layer in net.layers] == [
        ("stem", "conv2d"),
        ("bn", "batchnorm2d"),
        ("act#1", "relu"),
        ("block", "conv2d"),
        ("act#2", "relu"),
        ("pool", "maxpool2d"),
        ("act#3", "relu"),
        ("head", "linear"),
    ]
    layers = {layer.name: layer for layer in net.layers}
    assert layers["act#1"].inputs == ("bn",) and layers["pool"].inputs == ("(functional)",)  # after the residual add
    assert layers["stem"].phases == ("fwd", "bwd_weight")  # the model's input needs no gradient
    assert layers["act#2"].phases == ("fwd", "bwd_data")
    assert (layers["head"].input_shapes, layers["head"].output_shape, layers["head"].params) == (((128,),), (5,), 645)
    assert net.options == {"example_batch": 4}


def test_flops_are_flop_counters_per_phase_and_scale_with_the_batch():
    from tracker.model import predict

    net = network(SPEC)
    by_hand = {
        "stem": 2 * 4 * (8 * 8 * 8) * (3 * 3 * 3),
        "block": 2 * 4 * (8 * 8 * 8) * (8 * 3 * 3),
        "head": 2 * 4 * 128 * 5,
    }
    predicted = {(p.layer, p.phase): p for p in predict(net, 4)}
    for name, flops in by_hand.items():
        for phase in net.layer(name).phases:
            assert (predicted[(name, phase)].ops, predicted[(name, phase)].macs) == (flops, flops // 2), (name, phase)
    assert predicted[("act#1", "fwd")].macs == 0  # an element-wise op: counted as ours (next test)
    assert predicted[("stem", "fwd")].bytes == 4 * (4 * 3 * 8 * 8 + 224 + 4 * 8 * 8 * 8)
    assert {p.ops for p in predict(net, 8) if p.layer == "head"} == {2 * by_hand["head"]}


def test_batch_norm_relu_and_max_pool_are_counted_as_our_networks_count_them():
    """flop_counter counts 0 for them; a call of one counts what our layer of that kind and shapes
    counts, phase by phase, and says whose convention it followed."""
    from tracker.model import CONVENTIONS, predict
    from tracker.nets.layers import BatchNorm, Conv, Linear, MaxPool, Network, ReLU

    ours = Network("residual_cnn by hand", (3, 8, 8), {})  # tests/torch_models.py's layers, as ours
    ours.add("stem", Conv(8, (3, 3), (1, 1), (1, 1)))
    ours.add("bn", BatchNorm())
    ours.add("act#1", ReLU())
    ours.add("block", Conv(8, (3, 3), (1, 1), (1, 1)))
    ours.add("act#2", ReLU())
    ours.add("pool", MaxPool((2, 2), (2, 2)))
    ours.add("act#3", ReLU())
    ours.add("head", Linear(5))
    expected = {(p.layer, p.phase): p for p in predict(ours, 16)}
    counted = {(p.layer, p.phase): p for p in predict(network(SPEC), 16)}
    assert set(counted) == set(expected)
    for (layer, phase), p in counted.items():
        assert (p.ops, p.macs) == (expected[layer, phase].ops, expected[layer, phase].macs), (layer, phase)
    assert counted["bn", "bwd_weight"].ops == 5 * 16 * 8 * 8 * 8 > 0  # 5 per element
    assert counted["pool", "fwd"].ops == 4 * 16 * 8 * 4 * 4  # a 2x2 window per output
    assert counted["act#1", "fwd"].convention == CONVENTIONS["relu"]
    assert counted["stem", "fwd"].convention == CONVENTIONS["module"]


def test_batch_resizes_the_example_input(tmp_path, runner):
    """--batch N: the example's samples repeated to N; the model backend counts N samples."""
    db = str(tmp_path / "t.db")
    result = runner.invoke(cli, ["profile", "--torch", SPEC, "--batch", "10", "--backend", "model", "--db", db])
    assert result.exit_code == 0, result.output
    assert f"run 1 complete: {SPEC} run by torch, batch 10" in result.output
    store = open_store(db, write=False)
    assert run_dict(find_run(store, 1))["batch"] == 10
    head = [r for r in layer_rows(store, 1) if r["layer"] == "head"]
    assert {r["ops"] for r in head} == {2 * 10 * 128 * 5}
    step = ModuleStep(SPEC, batch=10)
    assert step.replays["stem"].call.args[0].shape == (10, 3, 8, 8)
    example = ModuleStep(SPEC).replays["stem"].call.args[0]
    assert torch.equal(step.replays["stem"].call.args[0][4:8], example)  # the example's own samples, again


def test_the_replayed_step_runs_every_layer_phase_in_its_own_range_in_training_order(tmp_path):
    from torch.profiler import ProfilerActivity, profile

    from tracker.library import kineto

    step = ModuleStep(SPEC, region=torch.profiler.record_function)
    step.iteration()  # twice: the in-place ReLU runs out of place, so its input is still its own
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step.iteration()
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    events = kineto.load(tmp_path / "trace.json")["traceEvents"]
    names = [e["name"] for e in sorted(events, key=lambda e: e.get("ts", 0)) if e.get("cat") == "user_annotation"]
    assert names == [f"{layer.name}/{phase}" for layer, phase in network(SPEC).training_order()]


def test_a_replay_computes_the_layers_own_gradients():
    step = ModuleStep(SPEC)
    head = step.replays["head"]
    head.forward()
    (x,), dy = [a for a in head.xs], head.dy
    dw, db = head.grad("bwd_weight")
    assert torch.allclose(dw, dy.T @ x, atol=1e-5) and torch.allclose(db, dy.sum(0), atol=1e-5)
    (dx,) = head.grad("bwd_data")
    assert torch.allclose(dx, dy @ head.call.module.weight, atol=1e-5)


def test_the_model_backend_stores_the_users_model_and_reports_it(tmp_path, runner):
    db = str(tmp_path / "t.db")
    result = runner.invoke(cli, ["profile", "--torch", SPEC, "--backend", "model", "--device", "h100", "--db", db])
    assert result.exit_code == 0, result.output
    assert f"run 1 complete: {SPEC} run by torch, batch 4" in result.output
    store = open_store(db, write=False)
    run = run_dict(find_run(store, 1))
    assert (run["network"], run["batch"], run["implementation"], run["network_options"]) == (
        SPEC,
        4,
        "torch",
        {"example_batch": 4},
    )
    rows = layer_rows(store, 1)
    assert [(r["layer"], r["kind"], r["phase"]) for r in rows][:3] == [
        ("stem", "conv2d", "fwd"),
        ("stem", "conv2d", "bwd_weight"),
        ("bn", "batchnorm2d", "fwd"),
    ]
    out = tmp_path / "report"
    reported = runner.invoke(cli, ["report", "1", "--db", db, "--out", str(out)])
    assert reported.exit_code == 0, reported.output
    assert f"tracker profile --torch {SPEC} --backend ncu" in reported.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--torch", "torch_models"], "--torch takes MODULE:FUNCTION (e.g. mymodels.resnet:build), not 'torch_models'"),
        (
            ["--torch", "no_such_module_here:build"],
            "--torch no_such_module_here:build: cannot import no_such_module_here: ModuleNotFoundError",
        ),
        (["--torch", "torch_models:nothing"], "torch_models has no function nothing"),
        (["--torch", "torch_models:broken"], "broken() raised ValueError: no weights file"),
        (
            ["--torch", "torch_models:not_a_model"],
            "not_a_model() returned a tuple of 2 (int, int), not (an nn.Module, an example input)",
        ),
        (["--torch", "torch_models:no_batch"], "the example input must be a tensor or a tuple of tensors"),
        (["alexnet", "--torch", SPEC], f"give NETWORK (alexnet) or --torch {SPEC}, not both"),
        (
            ["--torch", "torch_models:fixed_batch", "--batch", "8"],
            (
                "your model's forward raised RuntimeError: shape "
                "'[4, 12]' is invalid for input of size 96 (at --batch 8; "
                "torch_models:fixed_batch's example input has batch 4, "
                "which runs without --batch)"
            ),
        ),
        (["--torch", SPEC, "--impl", "ours"], "it takes --impl torch, not --impl ours"),
        (["--torch", SPEC, "--depth", "3"], "--depth is an option of tracker's networks"),
        ([], "name a NETWORK (tracker networks lists them) or your own model with --torch MODULE:FUNCTION"),
    ],
)
def test_bad_input_ends_in_one_line_and_creates_nothing(tmp_path, runner, args, message):
    db = tmp_path / "t.db"
    result = runner.invoke(cli, ["profile", *args, "--backend", "model", "--db", str(db)])
    assert result.exit_code == 1, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not db.exists()


def test_a_workload_of_a_users_model_runs_only_on_pytorch():
    from tracker.gpu.workload import Workload
    from tracker.implementations import checked

    with pytest.raises(TrackerError, match="is a PyTorch model: it takes --impl torch, not --impl ours"):
        checked(Workload(SPEC, batch=4))


def test_a_users_models_network_comes_from_the_library_arm_not_the_gpu_value():
    """gpu/ sits below library/ (docs/ARCHITECTURE.md): the Workload value does not trace a model;
    the library arm hands the traced network to Workload.of, and a bare one says so."""
    from tracker.gpu.workload import Workload
    from tracker.library.torch_module import network

    with pytest.raises(TrackerError, match="its network comes from tracker.library.torch_module.network"):
        _ = Workload(SPEC, batch=4, implementation="torch").net
    net = network(SPEC)
    assert Workload.of(net, 4, implementation="torch").net is net
