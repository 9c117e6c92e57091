"""The library arm replayed per counter pass (tracker/gpu/replay.py), on PyTorch's
CPU build with a stand-in for the profiler: each layer phase of our network in PyTorch and of a
user's model runs once per pass, every pass computes the same thing, and the replayed step leaves
what one plain step leaves: a skip's gradient summed once, a batch norm's running statistics
updated once, and no backward refused for a graph a pass before it freed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracker.nets import build

torch = pytest.importorskip("torch")

from tracker.library.torch_module import ModuleStep  # noqa: E402
from tracker.library.torch_net import TorchStep  # noqa: E402


class StandIn:
    """A profiler that wants ``passes`` passes of each layer phase; at the end of each pass it
    notes the phase and what ``observe`` reads of the step then."""

    def __init__(self, step, passes: int, observe):
        self.step, self.passes, self.observe = step, passes, observe
        self.seen: dict[str, list[list]] = {}
        self.count = 0

    def start(self, phase: str) -> None:
        pass

    def stop(self) -> bool:
        self.seen.setdefault(self.step.phase, []).append([t.clone() for t in self.observe(self.step)])
        self.count += 1
        return self.count % self.passes == 0


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def small_unet3d():  # skips (a gradient summed from two readers), batch norms, concatenation
    return build("unet3d", input_size="8", in_channels=1, base_filters=2, depth=2, classes=2)


def torch_state(step: TorchStep) -> list:
    grads = [g for pair in step.grads.values() for g in pair if g is not None]
    running = [t for pair in step.running.values() for t in pair]
    return grads + running + ([step.loss.detach()] if step.loss is not None else [])


def test_our_network_in_pytorch_replayed_per_pass_computes_one_steps_result():
    net = small_unet3d()
    plain, replayed = TorchStep(net, 2), TorchStep(net, 2)
    plain.iteration()
    stand_in = StandIn(replayed, 3, torch_state)
    replayed.iteration(stand_in)
    assert sorted(stand_in.seen) == sorted(f"{layer.name}/{phase}" for layer, phase in net.training_order("both"))
    for phase, passes in stand_in.seen.items():
        assert len(passes) == 3 and all(same(p, passes[0]) for p in passes), phase  # each pass the same
    assert same(torch_state(replayed), torch_state(plain))  # and one step's result, once
    assert any(layer.kind == "batchnorm" for layer in net.layers) and any(len(layer.inputs) > 1 for layer in net.layers)


def module_state(step: ModuleStep) -> list:
    return [b for call in step.replays.values() for b in call.call.module.buffers(recurse=False)]


def test_a_users_model_replayed_per_pass_computes_one_steps_result(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    spec = "torch_models:residual_cnn"  # tests/torch_models.py: a batch norm, a ReLU called 3 times
    plain, replayed = ModuleStep(spec), ModuleStep(spec)
    plain.iteration()
    stand_in = StandIn(replayed, 2, module_state)
    replayed.iteration(stand_in)
    assert sorted(stand_in.seen) == sorted(
        f"{layer.name}/{phase}" for layer, phase in replayed.net.training_order("both")
    )
    assert all(len(p) == 2 and same(p[0], p[1]) for p in stand_in.seen.values())
    assert module_state(replayed) and same(module_state(replayed), module_state(plain))


def test_a_range_session_counts_each_layer_phase_of_the_step_in_turn():
    """The CUPTI child's loop (``python -m tracker.implementations.child counted``) with a stand-in session: each layer
    phase begins a fresh counter image, runs until the session has its passes, and hands its
    ranges over once, in training order."""
    from tracker.profilers.cupti_session import PhasePasses

    class Session:
        def __init__(self, step):
            self.step, self.began, self.passes = step, [], 0

        def begin(self):
            self.began.append(self.step.phase)
            self.passes = 0

        def start(self):
            pass

        def stop(self):
            self.passes += 1
            return self.passes == 3

        def ranges(self):
            return [(self.step.phase, {"passes": float(self.passes)})]

    net = small_unet3d()
    step = TorchStep(net, 1)
    session = Session(step)
    passes = PhasePasses(session)
    step.iteration(passes)
    order = [f"{layer.name}/{phase}" for layer, phase in net.training_order("both")]
    assert session.began == order and passes.phases == [(name, [(name, {"passes": 3.0})]) for name in order]


def test_the_cupti_childs_error_reaches_the_parent_as_its_one_line(tmp_path, monkeypatch):
    """`--impl torch --backend cupti`'s child (``python -m tracker.implementations.child
    counted``), run as the collector runs it: the workload and metrics through its arguments,
    libcupti loaded, then PyTorch; a model that does not import ends it with its one-line error,
    which the parent raises as it was."""
    from tracker.errors import TrackerError
    from tracker.gpu.workload import Workload
    from tracker.implementations.pytorch import PyTorch

    monkeypatch.chdir(tmp_path)
    workload = Workload("no_such_module:build", implementation="torch")
    with pytest.raises(
        TrackerError,
        match=r"^--torch no_such_module:build: cannot import no_such_module: "
        r"ModuleNotFoundError",
    ):
        PyTorch().ranges(workload, ["smsp__inst_executed.sum"], 4, lambda line: None)
