"""A network's training step as kernel launches: the plan (which variant runs each layer and
phase, in which order) and the executor that carries it out on a ``Backend``.

Backend-neutral: the GPU runner executes it with CuPy and records every launch; the tests run
it on the CPU emulation and compare the gradients with the NumPy reference.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracker.errors import TrackerError, unknown
from tracker.gpu import launchers as L
from tracker.nets import Layer, Network
from tracker.variants import VARIANTS

# Until benchmarks say otherwise, the variant each op is expected to run fastest.
DEFAULTS = {"conv": "shared", "linear": "shared", "relu": "global", "maxpool": "global", "lrn": "shared",
            "softmax": "shared"}
FUSED_INTO = "fused-into-previous"  # a ReLU folded into the fused conv or linear before it


@dataclass(frozen=True)
class Step:
    layer: Layer
    phase: str
    variant: str  # FUSED_INTO: nothing launches, the layer before did the work


def resolve(net: Network, chosen: dict[str, str]) -> dict[str, str]:
    """The variant of every layer: the chosen one for its op, else the default. A fused conv or
    linear needs a ReLU after it (fc8 feeds softmax: it runs shared); that ReLU launches nothing."""
    missing = sorted({layer.kind for layer in net.layers} - set(VARIANTS))
    if missing:
        raise TrackerError(f"{net.name} has layers with no kernels yet: {', '.join(missing)}")
    for op, name in chosen.items():  # an API or workload caller skips parse_variants: check here too
        if op not in VARIANTS:
            raise unknown("op", op, list(VARIANTS))
        if name not in VARIANTS[op]:
            raise unknown(f"{op} variant", name, list(VARIANTS[op]))
    variants: dict[str, str] = {}
    for i, layer in enumerate(net.layers):
        if variants.get(layer.name) == FUSED_INTO:
            continue
        variant = chosen.get(layer.kind, DEFAULTS[layer.kind])
        if variant == "fused":
            after = net.layers[i + 1] if i + 1 < len(net.layers) else None
            consumers = [other for other in net.layers if layer.name in other.inputs]
            if after is not None and after.kind == "relu" and consumers == [after]:
                variants[after.name] = FUSED_INTO
            else:
                variant = "shared"
        variants[layer.name] = variant
    return variants


def plan(net: Network, chosen: dict[str, str], phases: str = "both") -> list[Step]:
    """Forward through the layers in order, then backward in reverse (per layer: weight gradient,
    then data gradient). ``phases``: fwd, bwd or both."""
    variants = resolve(net, chosen)
    steps = []
    if phases in ("fwd", "both"):
        steps += [Step(layer, "fwd", variants[layer.name]) for layer in net.layers]
    if phases in ("bwd", "both"):
        for layer in reversed(net.layers):
            steps += [Step(layer, phase, variants[layer.name]) for phase in ("bwd_weight", "bwd_data")
                      if phase in layer.phases]
    return steps


@dataclass
class Tensors:
    """Device arrays of one training step: activations, their gradients, parameters and theirs."""

    act: dict[str, Any] = field(default_factory=dict)
    grad: dict[str, Any] = field(default_factory=dict)
    params: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # layer -> (w, b)
    param_grads: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    labels: Any = None
    loss: Any = None


def initial_parameters(net: Network, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """He-normal weights and small biases for every conv and linear layer, float32."""
    rng = np.random.default_rng(seed)
    params = {}
    for layer in net.layers:
        if layer.kind in ("conv", "linear"):
            shape = _weight_shape(layer)
            fan_in = math.prod(shape[1:])
            params[layer.name] = ((rng.normal(size=shape) * math.sqrt(2 / fan_in)).astype(np.float32),
                                  (rng.normal(size=shape[0]) * 0.01).astype(np.float32))
    return params


def _weight_shape(layer: Layer) -> tuple[int, ...]:
    op = layer.op
    if layer.kind == "conv":
        return (op.out_channels, layer.input_shapes[0][0] // op.groups, *op.kernel)
    return (op.out_features, math.prod(layer.input_shapes[0]))


class Executor:
    """Runs ``plan`` on a backend. ``step(s)`` launches one layer phase; ``iteration()`` all."""

    def __init__(self, backend, net: Network, batch: int, chosen: dict[str, str], phases: str = "both",
                 seed: int = 0):
        self.b, self.net, self.batch = backend, net, batch
        self.steps = plan(net, chosen, phases)
        self.variants = resolve(net, chosen)
        rng = np.random.default_rng(seed + 1)
        t = self.t = Tensors()
        t.act["input"] = backend.asarray(rng.normal(size=(batch, *net.input_shape)).astype(np.float32))
        for layer in net.layers:
            shape = (batch, *layer.output_shape)
            fused = self.variants[layer.name] == FUSED_INTO
            t.act[layer.name] = t.act[layer.inputs[0]] if fused else backend.empty(shape)
            t.grad[layer.name] = backend.empty(shape)
        for layer in net.layers:  # a fused conv reads its ReLU's output gradient
            if self.variants[layer.name] == FUSED_INTO:
                t.grad[layer.inputs[0]] = t.grad[layer.name]
        for name, (w, b) in initial_parameters(net, seed).items():
            t.params[name] = (backend.asarray(w), backend.asarray(b))
            t.param_grads[name] = (backend.empty(w.shape), backend.empty(b.shape))
        classes = net.layers[-1].output_shape[0]
        t.labels = backend.asarray(rng.integers(0, classes, size=batch).astype(np.int32))
        t.loss = backend.empty((batch,))

    def region(self, step: Step):
        region = getattr(self.b, "region", None)
        return region(f"{step.layer.name}/{step.phase}") if region else nullcontext()

    def iteration(self) -> None:
        for step in self.steps:
            self.b.context = step  # the backend tags its launches with the step they serve
            with self.region(step):
                self.run(step)

    def run(self, step: Step) -> None:
        if step.variant == FUSED_INTO:
            return
        layer, t, b, v = step.layer, self.t, self.b, step.variant
        src = layer.inputs[0]
        x, y, dy = t.act[src], t.act[layer.name], t.grad[layer.name]
        dx = t.grad.get(src)
        op, kind, phase, n = layer.op, layer.kind, step.phase, self.batch
        if kind == "conv":
            w, bias = t.params[layer.name]
            dw, db = t.param_grads[layer.name]
            stride, pad = op.stride[0], op.padding[0]
            {"fwd": lambda: L.conv_fwd(b, v, x, w, bias, y, stride, pad),
             "bwd_data": lambda: L.conv_bwd_data(b, v, dy, w, dx, stride, pad, relu_y=y),
             "bwd_weight": lambda: L.conv_bwd_weight(b, v, dy, x, dw, db, stride, pad, relu_y=y)}[phase]()
        elif kind == "linear":
            w, bias = t.params[layer.name]
            dw, db = t.param_grads[layer.name]
            x2 = x.reshape(n, -1)
            {"fwd": lambda: L.linear_fwd(b, v, x2, w, bias, y),
             "bwd_data": lambda: L.linear_bwd_data(b, v, dy, w, dx.reshape(n, -1), relu_y=y),
             "bwd_weight": lambda: L.linear_bwd_weight(b, v, dy, x2, dw, db, relu_y=y)}[phase]()
        elif kind == "relu":
            L.relu_fwd(b, v, x, y) if phase == "fwd" else L.relu_bwd(b, v, dy, y, dx)
        elif kind == "maxpool":
            size, stride = op.kernel[0], op.stride[0]
            L.maxpool_fwd(b, v, x, y, size, stride) if phase == "fwd" else L.maxpool_bwd(b, v, dy, x, dx, size, stride)
        elif kind == "lrn":
            p = dict(size=op.size, alpha=op.alpha, beta=op.beta, k=op.k)
            L.lrn_fwd(b, v, x, y, **p) if phase == "fwd" else L.lrn_bwd(b, v, dy, x, y, dx, **p)
        elif kind == "softmax":
            if phase == "fwd":
                L.softmax_fwd(b, v, x.reshape(n, -1), y)
            else:
                L.softmax_xent_bwd(b, v, y, t.labels, dx.reshape(n, -1), t.loss)
