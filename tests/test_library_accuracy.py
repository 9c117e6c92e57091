"""`tracker selftest --impl torch` (tracker/library/accuracy.py) on PyTorch's CPU wheel: every layer
phase as PyTorch runs it, through our selftest's own checks and bounds; a wrong phase fails with
its layer, phase and output named; the options about our kernels are refused in one line."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest

from tracker.cli import cli
from tracker.nets import build
from tracker.ops import OPS
from tracker.ops.selftest import ELEMENTWISE, REDUCTION, network_cases, small_cases

torch = pytest.importorskip("torch")

from tracker.library.accuracy import selftest, step_errors  # noqa: E402


def expected_outputs(cases) -> set[tuple[str, str, str]]:
    """(layer, phase, output) of every phase of every case: what the op's check compares."""
    outputs = {"fwd": ("y",), "bwd_data": ("dx",), "bwd_weight": ("dw", "db")}
    own = {
        "softmax": {"fwd": ("p",), "bwd_data": ("dx", "loss")},
        "sigmoid": {"fwd": ("y",), "bwd_data": ("dx", "loss")},
        "concat": {"fwd": ("y",), "bwd_data": ("dx", "dx2")},
        "accumulate": {"bwd_data": ("dy",)},
    }
    return {
        (case.layer, phase, output)
        for case in cases
        for phase in OPS[case.op].phases
        for output in own.get(case.op, outputs)[phase]
    }


def assert_every_output_passes(cases) -> None:
    results, device = selftest(cases, lambda line: None, "cpu")
    assert device.startswith("the CPU (torch ")
    assert {(r.layer, r.phase, r.output) for r in results} == expected_outputs(cases)
    assert len(results) == len(expected_outputs(cases))  # each once
    assert {r.variant for r in results} == {"torch"}
    assert all(math.isfinite(r.error) and math.isfinite(r.max_error) for r in results)
    assert {r.tolerance for r in results} == {ELEMENTWISE, REDUCTION}  # the ops' own bounds, unscaled
    assert [r for r in results if not r.passed] == []


def test_every_small_case_passes_as_pytorch_runs_it_on_the_cpu():
    assert_every_output_passes(small_cases())


@pytest.mark.slow  # about 8 s: the float64 reference at AlexNet's shapes
def test_every_alexnet_layer_phase_passes_as_pytorch_runs_it_on_the_cpu():
    assert_every_output_passes(tuple(network_cases(build("alexnet"), 1)))


def scaled_gradient(monkeypatch, name: str, argument: int) -> None:
    """torch.nn.functional.NAME with the gradient of its ``argument``-th input 1% too large; its
    value (and every other gradient) exact."""
    real = getattr(torch.nn.functional, name)

    def wrong(*args, **kwargs):
        args = list(args)
        t = args[argument]
        args[argument] = t.detach() + (t - t.detach()) * 1.01
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, name, wrong)


@pytest.mark.parametrize(
    "function, argument, op, phase, output",
    [
        ("linear", 1, "linear", "bwd_weight", "dw"),  # F.linear(x, w, b): the weight
        ("conv2d", 0, "conv", "bwd_data", "dx"),  # F.conv2d(x, w, b): the input
    ],
)
def test_a_wrong_pytorch_phase_fails_with_its_layer_phase_and_output_named(
    monkeypatch, runner, function, argument, op, phase, output
):
    scaled_gradient(monkeypatch, function, argument)
    results, _ = selftest(small_cases(), lambda line: None, "cpu")
    failed = {(r.layer, r.phase, r.output) for r in results if not r.passed}
    assert failed == {(case.layer, phase, output) for case in small_cases() if case.op == op}
    assert all(0.005 < r.error < 0.02 for r in results if not r.passed)  # the 1% the patch adds

    done = runner.invoke(cli, ["selftest", "--impl", "torch", "--shapes", "small", "--format", "csv"])
    assert done.exit_code == 1, done.output
    layer = next(case.layer for case in small_cases() if case.op == op)
    assert f"failed: {layer} {phase} {output} (torch): error 1.00e-02, bound 1e-04" in done.stderr
    assert f"{len(results) - len(failed)} passed, {len(failed)} failed on the CPU (torch " in done.stderr


def test_the_cli_prints_the_selftests_table_and_its_summary(runner):
    done = runner.invoke(cli, ["selftest", "--impl", "torch", "--shapes", "small", "--format", "json"])
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout)
    assert {(r["layer"], r["phase"], r["output"]) for r in rows} == expected_outputs(small_cases())
    assert {(r["l1"], r["variant"], r["passed"]) for r in rows} == {(None, "torch", True)}
    summary = f"{len(rows)} passed, 0 failed on the CPU (torch {torch.__version__}; no GPU seen)"
    assert done.stderr.strip().splitlines()[-1] == summary


@pytest.mark.parametrize(
    "args, message",
    [
        (["--record"], "--record vouches for our kernels' builds; --impl torch checks PyTorch's: drop --record"),
        (["--tile", "128x128x8"], "--tile picks our GEMM kernels' tile; --impl torch runs PyTorch's: drop --tile"),
        (["--l1", "ca"], "--l1 ca picks our kernels' L1 policy; --impl torch runs PyTorch's: drop --l1"),
    ],
)
def test_the_options_about_our_kernels_are_refused_in_one_line(runner, args, message):
    done = runner.invoke(cli, ["selftest", "--impl", "torch", *args])
    assert done.exit_code == 2, done.output
    assert message in done.output and len(done.output.strip().splitlines()) == 1, done.output


def test_pytorch_missing_is_one_line(runner, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    done = runner.invoke(cli, ["selftest", "--impl", "torch", "--shapes", "small"])
    assert done.exit_code == 1, done.output
    assert done.output.strip() == (
        "Error: tracker selftest --impl torch needs PyTorch, which is not installed: pip install -e '.[torch]'"
    )


def test_the_whole_step_is_compared_per_layer_as_information():
    """Every layer with weights has its dw and db row, after the loss; on a small net on the CPU
    all are small, but nothing here passes or fails."""
    from samples import small_net

    rows = step_errors(small_net(), 3, "cpu")
    gradients, routes = rows[:9], rows[9:]
    assert [(r["layer"], r["output"]) for r in gradients] == [("loss", "loss")] + [
        (layer, output) for layer in ("fc4", "fc3", "conv2", "conv1") for output in ("dw", "db")
    ]
    assert all(0 <= r["error"] < 1e-4 for r in gradients), rows
    assert [(r["layer"], r["output"].split(" of ")[0]) for r in routes] == [
        ("relu1", "elements"),
        ("pool1", "windows"),
        ("relu2", "elements"),
        ("relu3", "elements"),
    ]
    assert routes[1]["output"] == f"windows of {3 * 8 * 4 * 4}"
    # no near-tie flipped here, so the gradients upstream agree
    assert [r.get("moved_maxima", r.get("flipped_signs")) for r in routes] == [0, 0, 0, 0]
    assert "passed" not in rows[0]


def test_a_pool_window_whose_maximum_rounding_moved_is_counted():
    """The whole step's error at a max-pool: a window whose fp32 input has its maximum elsewhere
    than the reference's sends the gradient to another element (what a near-tie flipped by
    rounding does)."""
    import torch
    from samples import small_net

    from tracker.library.accuracy import _moved_routes
    from tracker.library.torch_net import TorchStep

    net = small_net()
    step = TorchStep(net, 2, "cpu")
    step.iteration()
    before = {r["layer"]: r.get("moved_maxima") for r in _moved_routes(net, step)}
    x = step.inputs["pool1"].detach().clone()
    window = x[0, 0, :3, :3]  # element (0, 0) lies in this window alone (3 x 3, stride 2)
    x[0, 0, 0, 0] = window.min() - 1 if int(torch.argmax(window)) == 0 else window.max() + 1
    step.inputs["pool1"] = x
    after = {r["layer"]: r.get("moved_maxima") for r in _moved_routes(net, step)}
    assert after["pool1"] == before["pool1"] + 1


def test_a_relu_input_whose_sign_rounding_flipped_is_counted():
    """The whole step's error at a ReLU: an fp32 pre-activation on the other side of zero from
    the reference's passes a gradient the reference blocks (on the H200, PyTorch's AlexNet step
    was 1.5e-6 from the reference at conv5's gradients and 1.8e-3 at conv4's, with no max-pool
    window moved: tests/data/gpu-2026-11-26-h200/lib-step-b2.csv)."""
    from samples import small_net

    from tracker.library.accuracy import _moved_routes
    from tracker.library.torch_net import TorchStep

    net = small_net()
    step = TorchStep(net, 2, "cpu")
    step.iteration()
    flipped = lambda: {r["layer"]: r.get("flipped_signs") for r in _moved_routes(net, step)}  # noqa: E731
    before = flipped()
    x = step.inputs["relu2"].detach().clone()
    x[1, 3, 0, 0] = -x[1, 3, 0, 0] if x[1, 3, 0, 0] != 0 else 1.0
    step.inputs["relu2"] = x
    assert flipped() == before | {"relu2": before["relu2"] + 1}
