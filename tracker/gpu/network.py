"""A network's training step as kernel launches: the plan (which variant runs each layer and
phase, in which order) and the executor that carries it out on a ``Backend``.

Backend-neutral: the GPU runner executes it with CuPy and records every launch; the tests run
it on the CPU emulation and compare the gradients with the NumPy reference. What each layer
launches is its op's (tracker/ops): the executor only hands it the layer's arrays.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tracker.errors import TrackerError
from tracker.nets import Layer, Network
from tracker.ops import OPS
from tracker.ops.gemm import Tile
from tracker.ops.launch import Arrays, Backend

if TYPE_CHECKING:
    from tracker.gpu.workload import Workload

FUSED_INTO = "fused-into-previous"  # a layer folded into the variant before it (a ReLU into a fused conv)
INDEX_LIMIT = 2**31 - 1  # the kernels index an array with 32-bit ints (cheaper address arithmetic)


def check_indexing(net: Network, batch: int) -> None:
    """Refuses a batch whose largest activation the kernels' 32-bit indices cannot reach."""
    name, per_image = max([("input", math.prod(net.input_shape))] +
                          [(layer.name, math.prod(layer.output_shape)) for layer in net.layers], key=lambda e: e[1])
    if batch * per_image > INDEX_LIMIT:
        raise TrackerError(f"batch {batch} gives {name} {batch * per_image:,} elements; the kernels index arrays "
                           f"with 32-bit ints, so {net.name} runs at batch {INDEX_LIMIT // per_image} at most")


@dataclass(frozen=True)
class Step:
    layer: Layer
    phase: str
    variant: str  # FUSED_INTO: nothing launches, the layer before did the work


def resolve(net: Network, chosen: dict[str, str]) -> dict[str, str]:
    """The variant of every layer: the chosen one for its op, else the op's default. A variant
    that absorbs the next layer (the fused conv or linear, a ReLU) needs that layer right after it
    and alone reading it, else its fallback runs (fc8 feeds softmax: it runs shared); the
    absorbed layer launches nothing."""
    missing = sorted({layer.kind for layer in net.layers if layer.kind not in OPS})
    if missing:
        raise TrackerError(f"{net.name} has layers with no kernels yet: {', '.join(missing)}")
    OPS.check_chosen(chosen)  # an API or workload caller skips parse_variants: check here too
    variants: dict[str, str] = {}
    for i, layer in enumerate(net.layers):
        if variants.get(layer.name) == FUSED_INTO:
            continue
        op = OPS[layer.kind]
        variant = op.variant(chosen.get(layer.kind, op.default))
        if variant.absorbs:
            after = net.layers[i + 1] if i + 1 < len(net.layers) else None
            consumers = [other for other in net.layers if layer.name in other.inputs]
            if after is not None and after.kind == variant.absorbs and consumers == [after]:
                variants[after.name] = FUSED_INTO
            elif variant.fallback:
                variant = op.variant(variant.fallback)
        variants[layer.name] = variant.name
    return variants


def plan(net: Network, chosen: dict[str, str], phases: str = "both") -> list[Step]:
    """The network's training order (``Network.training_order``: forward, then backward in
    reverse, weight gradient before data gradient), each layer phase with its variant.
    ``phases``: fwd, bwd or both."""
    variants = resolve(net, chosen)
    return [Step(layer, phase, variants[layer.name]) for layer, phase in net.training_order(phases)]


@dataclass
class Tensors:
    """Device arrays of one training step: activations, their gradients, parameters and theirs."""

    act: dict[str, Any] = field(default_factory=dict)
    grad: dict[str, Any] = field(default_factory=dict)
    params: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # layer -> (w, b)
    param_grads: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    labels: Any = None
    loss: Any = None

    def of(self, layer: Layer) -> Arrays:
        """The arrays of one layer, by the roles its op's launchers read."""
        source = layer.inputs[0]
        w, bias = self.params.get(layer.name, (None, None))
        dw, db = self.param_grads.get(layer.name, (None, None))
        return Arrays(x=self.act[source], y=self.act[layer.name], dy=self.grad[layer.name], dx=self.grad.get(source),
                      w=w, bias=bias, dw=dw, db=db, labels=self.labels, loss=self.loss)


def initial_parameters(net: Network, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """He-normal weights and small biases for every conv and linear layer, float32."""
    rng = np.random.default_rng(seed)
    params = {}
    for layer in net.layers:
        shape = OPS[layer.kind].weights(layer) if layer.kind in OPS else None
        if shape:
            fan_in = math.prod(shape[1:])
            params[layer.name] = ((rng.normal(size=shape) * math.sqrt(2 / fan_in)).astype(np.float32),
                                  (rng.normal(size=shape[0]) * 0.01).astype(np.float32))
    return params


class Executor:
    """Runs ``plan`` on a backend. ``step(s)`` launches one layer phase; ``iteration()`` all."""

    def __init__(self, backend: Backend, net: Network, batch: int, chosen: dict[str, str], phases: str = "both",
                 seed: int = 0, tiles: dict[str, str] | None = None, steps: list[Step] | None = None):
        check_indexing(net, batch)
        self.b, self.net, self.batch = backend, net, batch
        self.tiles = {key: Tile.parse(label) for key, label in (tiles or {}).items()}  # 'layer/phase' -> tuned
        self.steps = plan(net, chosen, phases) if steps is None else steps
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

    @classmethod
    def of(cls, backend: Backend, workload: Workload) -> Executor:
        """The executor of a planned workload: its steps as planned (``Workload.planned``), not again."""
        if not workload.steps:
            raise TrackerError("the workload has no plan: Workload.planned() makes one")
        net = workload.net
        steps = [Step(net.layer(s.layer), s.phase, s.variant) for s in workload.steps]
        return cls(backend, net, workload.batch, workload.variants, workload.phases, tiles=workload.tiles, steps=steps)

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
        op = OPS[step.layer.kind]
        tile = self.tiles.get(f"{step.layer.name}/{step.phase}")  # `tracker tune`'s, for this GPU and shape
        op.launch(self.b, step.variant, step.phase, self.t.of(step.layer), tile=tile, **op.params(step.layer))
