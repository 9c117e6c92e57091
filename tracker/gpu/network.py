"""A network's training step as kernel launches: the plan (which variant runs each layer and
phase, in which order) and the executor that carries it out on a ``Backend``.

Backend-neutral: the GPU runner executes it with CuPy and records every launch; the tests run
it on the CPU emulation and compare the gradients with the NumPy reference. What each layer
launches is its op's (tracker/ops): the executor only hands it the layer's arrays.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tracker.errors import TrackerError
from tracker.kernel_names import phase_algorithm
from tracker.nets import Layer, Network
from tracker.ops import OPS
from tracker.ops.gemm import DEFAULT, Tile, fitted
from tracker.ops.launch import Arrays, Backend
from tracker.ops.softmax import label_shape
from tracker.ops.winograd import modelled

if TYPE_CHECKING:
    from tracker.gpu.workload import Workload

FUSED_INTO = "fused-into-previous"  # a layer folded into the variant before it (a ReLU into a fused conv)
IN_PLACE = "in-place"  # a layer whose output is its inputs' storage (a concatenation whose producers write it)
LAUNCHES_NOTHING = (FUSED_INTO, IN_PLACE)
INDEX_LIMIT = 2**31 - 1  # the kernels index an array with 32-bit ints (cheaper address arithmetic)
# the algorithms whose cost is a convolution's own count (its multiplies, its compulsory bytes): a
# plan that runs them is predicted as a plan with no algorithm named is
DIRECT_COUNT = ("direct", "implicit_gemm")


def check_indexing(net: Network, batch: int) -> None:
    """Refuses a batch whose largest activation the kernels' 32-bit indices cannot reach."""
    name, per_image = max(
        [("input", math.prod(net.input_shape))] + [(layer.name, math.prod(layer.output_shape)) for layer in net.layers],
        key=lambda e: e[1],
    )
    if batch * per_image > INDEX_LIMIT:
        raise TrackerError(
            f"batch {batch} gives {name} {batch * per_image:,} elements; the kernels index arrays "
            f"with 32-bit ints, so {net.name} runs at batch {INDEX_LIMIT // per_image} at most"
        )


def readers(net: Network) -> dict[str, list[Layer]]:
    """The layers that read each activation ("input" and every layer's output), in forward order."""
    found: dict[str, list[Layer]] = {"input": [], **{layer.name: [] for layer in net.layers}}
    for layer in net.layers:
        for name in layer.inputs:
            found[name].append(layer)
    return found


@dataclass(frozen=True)
class Step:
    layer: Layer
    phase: str
    variant: str  # FUSED_INTO: nothing launches, the layer before did the work


def resolve(net: Network, chosen: dict[str, str], batch: int | None = None) -> dict[str, str]:
    """The variant of every layer: the chosen one for its op, else the op's default. A variant
    that absorbs the next layer (the fused conv or linear, a ReLU) needs that layer right after it
    and alone reading it, and the absorbed layer's output read by one layer at most (a gradient
    summed from several readers has no phase of its own to be summed in), else its fallback runs
    (fc8 feeds softmax: it runs shared); the absorbed layer launches nothing. An in-place variant
    (the concatenation's) is IN_PLACE where ``placeable`` says so at ``batch``, else its fallback."""
    missing = {
        f"{layer.kind} ({len(layer.output_shape) - 1}-D)"
        if any(op.kind == layer.kind for op in OPS)
        else layer.kind: None
        for layer in net.layers
        if OPS.find(layer) is None
    }
    missing |= {
        f"{layer.kind} ({why})": None
        for layer in net.layers
        if (op := OPS.find(layer)) and (why := op.unsupported(layer))
    }
    if missing:
        raise TrackerError(f"{net.name} has layers with no kernels yet: {', '.join(sorted(missing))}")
    OPS.check_chosen(chosen)  # an API or workload caller skips parse_variants: check here too
    variants: dict[str, str] = {}
    read_by = readers(net)
    placed: set[str] = set()  # the layers whose storage an IN_PLACE layer holds
    for i, layer in enumerate(net.layers):
        if variants.get(layer.name) == FUSED_INTO:
            continue
        op = OPS.of(layer)
        variant = op.variant(chosen.get(op.kind, op.default))
        if variant.absorbs:
            after = net.layers[i + 1] if i + 1 < len(net.layers) else None
            if (
                after is not None
                and after.kind == variant.absorbs
                and read_by[layer.name] == [after]
                and len(read_by[after.name]) <= 1
            ):
                variants[after.name] = FUSED_INTO
            elif variant.fallback:
                variant = op.variant(variant.fallback)
        if variant.in_place:
            if placeable(net, layer, batch, variants, placed):
                variants[layer.name] = IN_PLACE
                continue
            variant = op.variant(variant.fallback or op.default)
        variants[layer.name] = variant.name
    return variants


def storage(net: Network, name: str, variants: dict[str, str]) -> str:
    """The layer whose output array holds activation ``name``: a layer fused into the one before
    it writes nothing of its own (a fused conv writes its ReLU's output)."""
    while variants.get(name) == FUSED_INTO:
        name = net.layer(name).inputs[0]
    return name


def placeable(net: Network, layer: Layer, batch: int | None, variants: dict[str, str], placed: set[str]) -> bool:
    """Whether ``layer``'s inputs can be laid out as slices of its output, which their producers
    then write: at batch 1 (a channel slice of a larger batch is no contiguous array, and the
    kernels take contiguous ones), each input a layer's output ("input" is the caller's), held by
    no other in-place layer; ``placed`` gains them."""
    if batch != 1 or "input" in layer.inputs or len(set(layer.inputs)) < len(layer.inputs):
        return False
    owners = {storage(net, name, variants) for name in layer.inputs}
    if len(owners) < len(layer.inputs) or owners & placed:
        return False
    placed |= owners
    return True


def plan(
    net: Network, chosen: dict[str, str], phases: str = "both", batch: int | None = None, by_rule: bool = False
) -> list[Step]:
    """The network's training order (``Network.training_order``: forward, then backward in
    reverse, weight gradient before data gradient), each layer phase with its variant at
    ``batch`` (``resolve``). ``phases``: fwd, bwd or both. ``by_rule``: where ``chosen`` names no
    variant for an op, each phase runs the one its op's rule picks (``Op.ruled``: the conv
    algorithm, tracker/ops/conv_rule.py), what `tracker profile` plans; else the op's default."""
    variants = resolve(net, chosen, batch)
    steps = [Step(layer, phase, variants[layer.name]) for layer, phase in net.training_order(phases)]
    return [_ruled(step, chosen, batch) for step in steps] if by_rule else steps


def algorithms(net: Network, planned: Mapping[str, str] | None, batch: int) -> dict[str, str] | None:
    """'layer/phase' -> the analytic model's algorithm (tracker/model/algorithms.py) of each 2-D
    conv phase of a plan, by the kernels its variant launches there (the default variant's where
    the variant's own algorithm does not apply: Winograd at conv1's stride 4 runs the implicit
    GEMM), where it costs other than the convolution's own count (DIRECT_COUNT). None: no plan
    (a library's run, or one recorded before plans were)."""
    if planned is None:
        return None
    found = {}
    for key, name in planned.items():
        name_of_layer, _, phase = key.partition("/")
        layer = net.layer(name_of_layer)
        op = OPS.find(layer)
        if layer.kind != "conv" or op is None or name not in op.variants:
            continue
        variant = op.variant(name)
        if variant.applies is not None and not variant.applies(op.case(layer, batch), phase):
            variant = op.variant(op.default)
        algorithm = modelled(phase_algorithm(k.name for k in variant.launches[phase].kernels), variant.name)
        if algorithm not in (None, *DIRECT_COUNT):
            found[key] = algorithm
    return found


def fitted_tiles(net: Network, planned: Mapping[str, str], batch: int) -> dict[str, str]:
    """'layer/phase' -> the GEMM tile the default plan runs there where it is not DEFAULT: fitted
    to the M and N of the GEMM its variant says it runs at the layer's case (``Variant.gemm``,
    ``gemm.fitted``). ``planned``: a plan as a run records it (``plan_of``)."""
    found = {}
    for key, name in planned.items():
        name_of_layer, _, phase = key.partition("/")
        layer = net.layer(name_of_layer)
        op = OPS.find(layer)
        variant = op.variants.get(name) if op else None  # LAUNCHES_NOTHING names no variant
        gemm = variant.gemm(op.case(layer, batch), phase) if op and variant and variant.gemm else None
        tile = fitted(gemm.M, gemm.N) if gemm else DEFAULT
        if tile != DEFAULT:
            found[key] = tile.label
    return found


def plan_of(steps: Sequence[Step]) -> dict[str, str]:
    """'layer/phase' -> variant: a plan as a run records it (run.plan)."""
    return {f"{s.layer.name}/{s.phase}": s.variant for s in steps}


def _ruled(step: Step, chosen: dict[str, str], batch: int | None) -> Step:
    """A step with its op's rule's variant, where the plan runs the op's default and --variant did
    not choose it (a layer fused into another, or run in place, keeps that)."""
    op = OPS.of(step.layer)
    if op.kind in chosen or step.variant != op.default:
        return step
    return replace(step, variant=op.ruled(op.case(step.layer, batch or 1), step.phase))


@dataclass
class Tensors:
    """Device arrays of one training step: activations, their gradients, parameters and theirs."""

    act: dict[str, Any] = field(default_factory=dict)
    grad: dict[str, Any] = field(default_factory=dict)
    params: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # layer -> (w, b)
    param_grads: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    labels: Any = None
    loss: Any = None
    # (activation, reader) -> the buffer a reader other than the activation's first writes its
    # share of the activation's gradient into; added into ``grad`` by the accumulate op
    shares: dict[tuple[str, str], Any] = field(default_factory=dict)
    # a batch norm's (mean, invstd, running_mean, running_var), each (C,)
    statistics: dict[str, tuple[Any, Any, Any, Any]] = field(default_factory=dict)
    # a max-pool's saved maxima (int32, its output's shape), where its variant saves them
    argmax: dict[str, Any] = field(default_factory=dict)

    def of(self, layer: Layer) -> Arrays:
        """The arrays of one layer, by the roles its op's launchers read (a second input: concat)."""
        w, bias = self.params.get(layer.name, (None, None))
        dw, db = self.param_grads.get(layer.name, (None, None))
        sources = [*layer.inputs, None][:2]
        x, x2 = (self.act[name] if name else None for name in sources)
        dx, dx2 = (self.gradient(name, layer.name) if name else None for name in sources)
        mean, invstd, running_mean, running_var = self.statistics.get(layer.name, (None,) * 4)
        return Arrays(
            x=x,
            y=self.act[layer.name],
            dy=self.grad[layer.name],
            dx=dx,
            w=w,
            bias=bias,
            dw=dw,
            db=db,
            labels=self.labels,
            loss=self.loss,
            x2=x2,
            dx2=dx2,
            mean=mean,
            invstd=invstd,
            running_mean=running_mean,
            running_var=running_var,
            argmax=self.argmax.get(layer.name),
        )

    def gradient(self, source: str, reader: str) -> Any:
        """Where ``reader`` writes its share of ``source``'s gradient (None: "input" has none)."""
        return self.shares.get((source, reader), self.grad.get(source))


def has_bias(layer: Layer) -> bool:
    """Whether a learned layer has a bias (a batch norm's shift counts as one)."""
    return getattr(layer.op, "bias", True)


def labels(net: Network, batch: int, rng: np.random.Generator) -> np.ndarray:
    """What the loss layer compares with, drawn after the input from the same ``rng`` (our
    executor and PyTorch's step draw alike): softmax a class per image and position (int32: a
    classifier's one per image, a 3-D U-Net's one per voxel), sigmoid a 0/1 target per output
    element (float32)."""
    last = net.layers[-1]
    if last.kind == "sigmoid":
        return (rng.random(size=(batch, *last.output_shape)) < 0.5).astype(np.float32)
    return rng.integers(0, last.output_shape[0], size=loss_shape(net, batch)).astype(np.int32)


def loss_shape(net: Network, batch: int) -> tuple[int, ...]:
    """The loss layer's losses: softmax's one per image and position (its labels' shape too,
    ``ops.softmax.label_shape``), sigmoid's one per image."""
    last = net.layers[-1]
    return (batch,) if last.kind == "sigmoid" else label_shape((batch, *last.output_shape))


def initial_parameters(net: Network, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """Every learned layer's (weight, bias), float32: He-normal weights and small biases for a
    (transposed) convolution or linear layer; a batch norm's scale near 1 and shift near 0. A
    layer built without a bias (unet3d's convolutions before batch norm) has None; its bias is
    drawn all the same, so every other layer's parameters stay what they were."""
    rng = np.random.default_rng(seed)
    params = {}
    for layer in net.layers:
        shape = layer.op.weight_shape(list(layer.input_shapes))
        if shape is None:
            continue
        if layer.kind == "batchnorm":
            scale = 1 + rng.normal(size=shape) * 0.1
        else:
            scale = rng.normal(size=shape) * math.sqrt(2 / math.prod(shape[1:]))
        bias = rng.normal(size=layer.op.biases() or shape[0]) * 0.01
        params[layer.name] = (scale.astype(np.float32), bias.astype(np.float32) if has_bias(layer) else None)
    return params


class PlanRunner:
    """Runs ``plan`` on a backend. ``step(s)`` launches one layer phase; ``iteration()`` all."""

    def __init__(
        self,
        backend: Backend,
        net: Network,
        batch: int,
        chosen: dict[str, str],
        phases: str = "both",
        seed: int = 0,
        tiles: dict[str, str] | None = None,
        steps: list[Step] | None = None,
    ):
        check_indexing(net, batch)
        self.b, self.net, self.batch = backend, net, batch
        self.tiles = {key: Tile.parse(label) for key, label in (tiles or {}).items()}  # 'layer/phase' -> planned
        self.steps = plan(net, chosen, phases, batch) if steps is None else steps
        self.variants = resolve(net, chosen, batch)
        rng = np.random.default_rng(seed + 1)
        t = self.t = Tensors()
        t.act["input"] = backend.asarray(rng.normal(size=(batch, *net.input_shape)).astype(np.float32))
        slices, grad_slices = self._in_place(backend, batch)
        for layer in net.layers:
            shape = (batch, *layer.output_shape)
            if self.variants[layer.name] == FUSED_INTO:
                t.act[layer.name] = t.act[layer.inputs[0]]
            elif layer.name in slices:
                t.act[layer.name] = slices[layer.name]
            elif layer.name not in t.act:
                t.act[layer.name] = backend.empty(shape)
            if layer.name not in t.grad:  # an IN_PLACE layer's is there already
                t.grad[layer.name] = backend.empty(shape)
        read_by = readers(net)
        for (name, joined), part in grad_slices.items():  # an IN_PLACE layer's share of an input's gradient
            if read_by[name][0].name == joined:
                t.grad[name] = part
        for layer in net.layers:  # a fused conv reads its ReLU's output gradient
            if self.variants[layer.name] == FUSED_INTO:
                t.grad[layer.inputs[0]] = t.grad[layer.name]
        for name, reading in read_by.items():
            if name in t.grad:
                for reader in reading[1:]:
                    key = (name, reader.name)
                    t.shares[key] = grad_slices[key] if key in grad_slices else backend.empty(t.grad[name].shape)
        self.summed_before = self._first_backward_steps()
        for name, (w, b) in initial_parameters(net, seed).items():
            t.params[name] = (backend.asarray(w), None if b is None else backend.asarray(b))
            t.param_grads[name] = (backend.empty(w.shape), None if b is None else backend.empty(b.shape))
        for layer in net.layers:  # PyTorch's running statistics start at 0 and 1
            if layer.kind == "batchnorm":
                c = layer.output_shape[0]
                t.statistics[layer.name] = (
                    backend.empty((c,)),
                    backend.empty((c,)),
                    backend.asarray(np.zeros(c, np.float32)),
                    backend.asarray(np.ones(c, np.float32)),
                )
        for layer in net.layers:  # a max-pool's saved maxima, where its variant keeps them
            variant = OPS.of(layer).variants.get(self.variants[layer.name])
            if variant is not None and variant.saves_argmax:
                t.argmax[layer.name] = backend.asarray(np.zeros((batch, *layer.output_shape), np.int32))
        t.labels = backend.asarray(labels(net, batch, rng))
        t.loss = backend.empty(loss_shape(net, batch))

    def _in_place(self, backend: Backend, batch: int) -> tuple[dict[str, Any], dict[tuple[str, str], Any]]:
        """Each IN_PLACE layer's output and output gradient (in ``self.t``), and their channel
        slices: {the layer whose output array holds an input: its slice of the output}, and
        {(input, the IN_PLACE layer): its slice of the output gradient, that layer's share of the
        input's gradient}. Contiguous views: ``placeable`` allows batch 1 alone."""
        slices: dict[str, Any] = {}
        grad_slices: dict[tuple[str, str], Any] = {}
        for layer in self.net.layers:
            if self.variants[layer.name] != IN_PLACE:
                continue
            shape = (batch, *layer.output_shape)
            y = self.t.act[layer.name] = backend.empty(shape)
            dy = self.t.grad[layer.name] = backend.empty(shape)
            first = 0
            for name in layer.inputs:
                last = first + self.net.shape_of(name)[0]
                slices[storage(self.net, name, self.variants)] = y[:, first:last]
                grad_slices[(name, layer.name)] = dy[:, first:last]
                first = last
        return slices, grad_slices

    def _first_backward_steps(self) -> dict[tuple[str, str], list[Any]]:
        """(layer, phase) of the first backward step of each layer whose output gradient has
        shares to add, and the shares: they are summed there, before its own kernels."""
        shares: dict[str, list[Any]] = {}
        for (name, _), buffer in self.t.shares.items():
            shares.setdefault(name, []).append(buffer)
        first: dict[tuple[str, str], list[Any]] = {}
        for step in self.steps:
            name = step.layer.name
            if step.phase != "fwd" and name in shares:
                first[(name, step.phase)] = shares.pop(name)
        return first

    @classmethod
    def of(cls, backend: Backend, workload: Workload) -> PlanRunner:
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
            self.step(step)

    def step(self, step: Step) -> None:
        """One layer phase, its launches tagged with it and inside its NVTX range."""
        self.b.context = step  # the backend tags its launches with the step they serve
        with self.region(step):
            self.run(step)

    def arrays(self, step: Step) -> list[Any]:
        """Every device array ``step`` reads or writes: its layer's, by role, and the shares of its
        output gradient that it sums (tracker/gpu/replay.py restores them between passes)."""
        held = self.t.of(step.layer)
        found = [getattr(held, role.name) for role in fields(held)]
        found += self.summed_before.get((step.layer.name, step.phase), [])
        return [array for array in found if array is not None]

    def run(self, step: Step) -> None:
        for share in self.summed_before.get((step.layer.name, step.phase), ()):
            OPS["accumulate"].launch(self.b, "global", "bwd_data", Arrays(dy=self.t.grad[step.layer.name], dx2=share))
        if step.variant in LAUNCHES_NOTHING:
            return
        op = OPS.of(step.layer)
        tile = self.tiles.get(f"{step.layer.name}/{step.phase}")  # tuned for this GPU, or fitted to the shape
        op.launch(self.b, step.variant, step.phase, self.t.of(step.layer), tile=tile, **op.params(step.layer))
