"""A user's own PyTorch model as a tracker network: ``tracker profile --torch MODULE:FUNCTION``.

FUNCTION (no arguments) returns an ``nn.Module`` and an example input (a tensor or a tuple of
them; its first dimension is the batch, which ``--batch`` resizes). One forward pass with hooks
records every call of a leaf module (a module without children): each call is a layer, named by
its module path (a module called k times gives ``path#1`` ... ``path#k``), with the shapes it
saw, its parameters and the FLOPs ``torch.utils.flop_counter`` counts for its forward, weight
gradient and data gradient; flop_counter counts no element-wise op, so a batch norm, ReLU or
max-pool call is counted as our own networks count that layer (``OUR_LAYERS``).
Kernels that several modules share are told apart by the range each runs in, and a
module called more than once by its call's name and invocation order.

``ModuleStep`` replays the calls as a training step, layer phase by layer phase in
``Network.training_order`` under our range names, each call on its recorded inputs (so that its
backward is its own, as ``TorchStep`` does for our networks). What runs between leaf modules in
the model's own ``forward`` (a residual add, a reshape) is no module's and is not replayed.
In-place activations run out of place: autograd refuses an in-place op on a layer's own input.
Everything a replay needs is made before the measured iterations, so that no kernel runs outside
a layer phase's range (a collector's pass 2 sees exactly pass 1's launches).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from tracker.errors import TrackerError
from tracker.gpu.replay import Passes, replay_phase
from tracker.library.torch_net import Region, bracket_nodes, nvtx_region
from tracker.nets import Network
from tracker.nets.layers import BatchNorm, Layer, LayerOp, MaxPool, Module, ReLU

SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
CONTAINERS = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)  # hold layers, are none


@dataclass
class Call:
    """One call of a leaf module, with what a replay of it needs."""

    name: str  # module path, '#k' for the k-th of several calls
    module: torch.nn.Module
    args: list  # detached copies of the tensors it was called with, other arguments as they were
    needs_input_grad: bool
    output: torch.Tensor
    sources: tuple[str, ...] = ()  # the layers (or 'input') that produced its tensor arguments
    flops: dict[str, int] = field(default_factory=dict)
    ours: str = ""  # the kind of our layer that counted its ops; '': flop_counter did


def check_spec(spec: str) -> str:
    if not SPEC.fullmatch(spec or ""):
        raise TrackerError(f"--torch takes MODULE:FUNCTION (e.g. mymodels.resnet:build), not '{spec}'")
    return spec


def load(spec: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """The model and example inputs FUNCTION returns, imported as ``python -m`` would (the current
    directory first on the path); anything else ends in one line saying what went wrong."""
    module_name, function = check_spec(spec).split(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        imported = importlib.import_module(module_name)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the user's code: whatever it raises (exit() too) is reported in one line
        raise TrackerError(f"--torch {spec}: cannot import {module_name}: {_said(exc)}") from None
    make = getattr(imported, function, None)
    if not callable(make):
        raise TrackerError(f"--torch {spec}: {module_name} has no function {function}")
    try:
        made = make()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        raise TrackerError(f"--torch {spec}: {function}() raised {_said(exc)}") from None
    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module)):
        raise TrackerError(f"--torch {spec}: {function}() returned {_kind(made)}, not (an nn.Module, an example input)")
    model, example = made
    inputs = example if isinstance(example, tuple) else (example,)
    if not inputs or not all(isinstance(x, torch.Tensor) and x.dim() >= 1 for x in inputs):
        raise TrackerError(
            f"--torch {spec}: the example input must be a tensor or a tuple of tensors, each with a "
            f"batch dimension, not {_kind(example)}"
        )
    if len({x.shape[0] for x in inputs}) != 1:
        raise TrackerError(f"--torch {spec}: the example inputs differ in batch size (first dimension)")
    return model, inputs


def at_batch(inputs: tuple[torch.Tensor, ...], batch: int | None) -> tuple[torch.Tensor, ...]:
    """The example inputs with ``batch`` samples each (None: as they are): the example's own
    samples along the first dimension, repeated as often as it takes, then cut, so the values
    stay the kind the model was given (token ids stay ids)."""
    if batch is None or batch == inputs[0].shape[0]:
        return inputs
    copies = -(-batch // inputs[0].shape[0])
    return tuple(x.repeat(copies, *[1] * (x.dim() - 1))[:batch].contiguous() for x in inputs)


def record_at(
    spec: str, model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], batch: int | None
) -> tuple[list[Call], tuple[torch.Tensor, ...]]:
    """``record`` of the model on its example resized to ``batch``: (the calls, the inputs it ran).
    A model that cannot take another batch (a reshape to a fixed size, say) says so in one line."""
    resized = at_batch(inputs, batch)
    try:
        return record(model, resized), resized
    except TrackerError as exc:
        if resized is inputs:
            raise
        raise TrackerError(
            f"{exc} (at --batch {batch}; {spec}'s example input has batch {inputs[0].shape[0]}, "
            "which runs without --batch)"
        ) from None


def _said(exc: BaseException) -> str:
    """'RuntimeError: its first line': what the user's code raised, as one line."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _kind(value: Any) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} ({', '.join(type(v).__name__ for v in value)})"
    return f"a {type(value).__name__}"


def record(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> list[Call]:
    """Every call of a leaf module in one training-mode forward pass, in call order."""
    for m in model.modules():
        if getattr(m, "inplace", False) is True:
            m.inplace = False
    # next(), not any(): an empty nn.Sequential is falsy. A container is never a layer.
    leaves = [
        (path or type(m).__name__, m)
        for path, m in model.named_modules()
        if next(m.children(), None) is None and not isinstance(m, CONTAINERS)
    ]
    if not leaves:
        raise TrackerError(
            f"--torch: {type(model).__name__} has no leaf modules (nn.Conv2d, nn.Linear, ...): "
            "each call of one is a layer, so there is nothing to profile"
        )
    produced: dict[int, str] = {id(x): "input" for x in inputs}
    calls: list[Call] = []
    keep: list[torch.Tensor] = []  # outputs alive until the pass ends, so that their ids stay theirs

    def hook(path: str):
        def after(module, args, output):
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            out = (
                output
                if isinstance(output, torch.Tensor)
                else next(
                    (o for o in (output if isinstance(output, (tuple, list)) else ()) if isinstance(o, torch.Tensor)),
                    None,
                )
            )
            if out is None:
                raise TrackerError(f"--torch: module {path} ({type(module).__name__}) returned no tensor")
            calls.append(
                Call(
                    path,
                    module,
                    [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args],
                    any(t.requires_grad for t in tensors),
                    out.detach(),
                    tuple(produced.get(id(t), "(functional)") for t in tensors),
                )
            )
            produced[id(out)] = path
            keep.append(out)

        return after

    handles = [m.register_forward_hook(hook(path)) for path, m in leaves]
    try:
        model.train()
        model(*inputs)
    except (KeyboardInterrupt, TrackerError):
        raise
    except BaseException as exc:  # the user's code
        raise TrackerError(f"--torch: your model's forward raised {_said(exc)}") from None
    finally:
        for handle in handles:
            handle.remove()
    return _named(calls)


def _named(calls: list[Call]) -> list[Call]:
    """path#k for each call of a module called more than once; its consumers' sources follow."""
    counts: dict[str, int] = {}
    for call in calls:
        counts[call.name] = counts.get(call.name, 0) + 1
    seen: dict[str, int] = {}
    renamed: dict[str, str] = {}
    for call in calls:
        call.sources = tuple(renamed.get(s, s) for s in call.sources)
        if counts[call.name] > 1:
            seen[call.name] = seen.get(call.name, 0) + 1
            renamed[call.name] = f"{call.name}#{seen[call.name]}"
            call.name = renamed[call.name]
    return calls


class Replay:
    """One call made replayable: inputs, output gradient and parameters, all made up front."""

    def __init__(self, call: Call, seed: int):
        generator = torch.Generator(device=call.output.device).manual_seed(seed)
        self.call = call
        self.params = [p for p in call.module.parameters(recurse=False) if p.requires_grad]
        self.dy = torch.randn(
            call.output.shape, generator=generator, device=call.output.device, dtype=call.output.dtype
        )
        self.xs: list = []
        self.out: torch.Tensor | None = None

    def forward(self) -> None:
        """The call on its recorded inputs (a view of each: no copy, so no kernel)."""
        self.xs = [
            a.detach().requires_grad_(self.call.needs_input_grad and a.is_floating_point())
            if isinstance(a, torch.Tensor)
            else a
            for a in self.call.args
        ]
        output = self.call.module(*self.xs)
        self.out = (
            output if isinstance(output, torch.Tensor) else next(o for o in output if isinstance(o, torch.Tensor))
        )

    def grad(self, phase: str, keep_graph: bool = False) -> tuple:
        """bwd_weight: the gradients of its parameters; bwd_data: of its inputs (the graph kept
        for another pass with ``keep_graph``)."""
        assert self.out is not None
        wrt = (
            self.params
            if phase == "bwd_weight"
            else [x for x in self.xs if isinstance(x, torch.Tensor) and x.requires_grad]
        )
        return torch.autograd.grad(
            self.out, wrt, self.dy, retain_graph=keep_graph or phase == "bwd_weight", allow_unused=True
        )

    def restorer(self, phase: str) -> Callable[[], None]:
        """What puts back the buffers the forward updates in place (a batch norm's running
        statistics), as they are now; the gradients change nothing that lasts."""
        buffers = list(self.call.module.buffers(recurse=False)) if phase == "fwd" else []
        saved = [b.clone() for b in buffers]

        def restore() -> None:
            for b, copy in zip(buffers, saved):
                b.copy_(copy)

        return restore


def count_flops(calls: list[Call]) -> None:
    """Ops per phase of each call: by torch.utils.flop_counter on a replay of it, or for a call
    of one of ``OUR_LAYERS``, as our own networks count that layer (tracker.model.costs)."""
    from torch.utils.flop_counter import FlopCounterMode

    from tracker.model.costs import costs

    for i, call in enumerate(calls):
        replay = Replay(call, i)
        phases = ["fwd"] + (["bwd_weight"] if replay.params else []) + (["bwd_data"] if call.needs_input_grad else [])
        ours = our_layer(call)
        if ours is not None:
            counted = costs(ours, call.output.shape[0])
            call.flops = {phase: counted[phase].ops if phase in counted else 0 for phase in phases}
            call.ours = ours.kind
            continue
        for phase in phases:
            with FlopCounterMode(display=False) as counter:
                replay.forward() if phase == "fwd" else replay.grad(phase)
            call.flops[phase] = int(counter.get_total_flops())


# The modules flop_counter counts 0 for (it counts matrix products and convolutions only) that
# our networks have a layer for: a call of one is counted by that layer's convention.
OUR_LAYERS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "ReLU", "MaxPool1d", "MaxPool2d", "MaxPool3d")


def our_layer(call: Call) -> Layer | None:
    """The call as the layer of ours that counts its ops (its shapes as recorded), or None where
    its module is none of ``OUR_LAYERS``."""
    op = _our_op(call.module)
    if op is None:
        return None
    shapes = tuple(tuple(a.shape[1:]) for a in call.args if isinstance(a, torch.Tensor))
    return Layer(
        0,
        call.name,
        op,
        ("input",),
        shapes,
        tuple(call.output.shape[1:]),
        op.params(list(shapes)),
        call.needs_input_grad,
    )


def _our_op(module: torch.nn.Module) -> LayerOp | None:
    kind = type(module).__name__
    if kind not in OUR_LAYERS:
        return None
    if kind == "ReLU":
        return ReLU()
    if kind.startswith("BatchNorm"):
        return BatchNorm()
    dims = int(kind[-2])  # MaxPool2d: 2
    kernel, stride = (v if isinstance(v, tuple) else (v,) * dims for v in (module.kernel_size, module.stride))
    return MaxPool(kernel, stride)


def network(spec: str, batch: int | None = None) -> Network:
    """The user's model as a tracker network at ``batch`` (None: its example's): one layer per
    leaf-module call, with its FLOPs."""
    model, example = load(spec)
    calls, inputs = record_at(spec, model, example, batch)
    count_flops(calls)
    return as_network(spec, calls, inputs)


def as_network(spec: str, calls: list[Call], inputs: tuple[torch.Tensor, ...]) -> Network:
    """The network of recorded calls, with the FLOPs counted on them (none for a replay, which
    needs only the layers and their order)."""
    if not calls:
        raise TrackerError(f"--torch {spec}: the model ran no leaf module")
    batch = inputs[0].shape[0]
    net = Network(spec, tuple(inputs[0].shape[1:]), options={"example_batch": batch})
    for i, call in enumerate(calls, 1):
        shapes = tuple(tuple(a.shape[1:]) for a in call.args if isinstance(a, torch.Tensor))
        weights = sum(p.numel() for p in call.module.parameters(recurse=False) if p.requires_grad)
        op = Module(
            type(call.module).__name__,
            tuple(call.output.shape[1:]),
            weights,
            tuple(sorted(call.flops.items())),
            batch,
            call.ours,
        )
        net.layers.append(
            Layer(i, call.name, op, call.sources or ("input",), shapes, op.output, weights, call.needs_input_grad)
        )
    net.notes.append(
        f"{spec}: {len(calls)} leaf-module calls; FLOPs from torch.utils.flop_counter at batch {batch}, "
        "batch norm, ReLU and max-pool ops as our networks count them"
    )
    return net


class ModuleStep:
    """One training step of the user's model, replayed call by call (``TorchStep``'s interface)."""

    def __init__(
        self,
        spec: str,
        device: str = "cpu",
        phases: str = "both",
        region: Region | None = None,
        allow_tf32: bool = False,
        batch: int | None = None,
    ):
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
        torch.backends.cudnn.allow_tf32 = allow_tf32
        model, example = load(spec)
        model, example = model.to(device), tuple(x.to(device) for x in example)
        calls, inputs = record_at(spec, model, example, batch)
        self.net = as_network(spec, calls, inputs)
        self.order = self.net.training_order(phases)
        self.replays = {call.name: Replay(call, i) for i, call in enumerate(calls)}
        self.region = region or (nvtx_region if torch.device(device).type == "cuda" else _no_region)
        self.on_engine_threads = torch.device(device).type == "cuda"  # as TorchStep: backward on the device's thread
        self.phase = ""

    def iteration(self, passes: Passes | None = None) -> None:
        """One training step; with ``passes``, each layer phase replayed per pass (``TorchStep``'s)."""
        for layer, phase in self.order:
            self.phase = f"{layer.name}/{phase}"
            call = self.replays[layer.name]
            run = partial(self._phase, call, phase, passes is not None)
            if passes is None:
                run()
            else:
                replay_phase(self.phase, run, call.restorer(phase), passes)

    def _phase(self, call: Replay, phase: str, keep_graph: bool) -> None:
        with self.region(self.phase):
            if phase != "fwd":
                call.grad(phase, keep_graph)
                return
            call.forward()
            if self.on_engine_threads and call.out is not None and call.out.grad_fn is not None:
                bracket_nodes(call.out, lambda: self.phase, self.region)


def _no_region(name: str) -> AbstractContextManager:
    return nullcontext()
