"""Layer specs with shape inference.

Shapes are per sample, channels first: ``(C, H, W)`` for 2-D nets, ``(C, D, H, W)`` for 3-D nets,
``(F,)`` after a fully-connected layer. The batch size is never part of a spec: the model and the
runners multiply by it. One op class per layer kind; each knows its output shape and parameter
count, nothing about cost (that is ``tracker.model``'s job).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import ClassVar

from tracker.errors import TrackerError
from tracker.phases import BACKWARD_ORDER

Shape = tuple[int, ...]


def _tuple(value: int | tuple[int, ...], dims: int) -> tuple[int, ...]:
    return (value,) * dims if isinstance(value, int) else tuple(value)


def numel(shape: Shape) -> int:
    return math.prod(shape)


@dataclass(frozen=True)
class LayerOp:
    """A layer's operation, as the model counts it (``tracker.ops.Op`` is the family of kernels that
    runs one). Subclasses set ``kind`` and implement ``infer``."""

    kind: ClassVar[str] = ""
    has_weights: ClassVar[bool] = False

    def infer(self, inputs: list[Shape]) -> Shape:
        raise NotImplementedError

    def params(self, inputs: list[Shape]) -> int:
        weights = self.weight_shape(inputs)
        return (numel(weights) if weights else 0) + self.biases()

    def weight_shape(self, inputs: list[Shape]) -> Shape | None:
        """The shape of its learned weight tensor (PyTorch's layout), or None; its bias is
        ``biases()`` long."""
        return None

    def biases(self) -> int:
        """How many of ``params`` are biases (the paper's convention does not count their ops)."""
        return 0

    def weighted(self) -> bool:
        """Whether it has weights to learn (a bwd_weight phase)."""
        return self.has_weights

    def label(self) -> str:
        """The layer's kind as shown and stored (``kind``: the model's cost formula)."""
        return self.kind

    def counted_as(self) -> str:
        """The kind whose counting convention its ops follow (tracker.model.costs.CONVENTIONS)."""
        return self.kind

    def attrs(self) -> dict:
        """The op's settings, JSON-ready, for ``tracker networks`` and the store."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def _only(inputs: list[Shape], kind: str) -> Shape:
    if len(inputs) != 1:
        raise TrackerError(f"{kind} takes one input, got {len(inputs)}")
    return inputs[0]


def _window_out(size: int, kernel: int, stride: int, pad: int, what: str) -> int:
    out = (size + 2 * pad - kernel) // stride + 1
    if out < 1:
        raise TrackerError(f"{what}: input {size} is too small for kernel {kernel} (stride {stride}, pad {pad})")
    return out


@dataclass(frozen=True)
class Conv(LayerOp):
    """N-d convolution, cross-correlation as in every framework. ``groups`` = C_in is depthwise."""

    kind: ClassVar[str] = "conv"
    has_weights: ClassVar[bool] = True
    out_channels: int
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    groups: int = 1
    bias: bool = True

    def infer(self, inputs: list[Shape]) -> Shape:
        c, *spatial = _only(inputs, self.kind)
        if c % self.groups or self.out_channels % self.groups:
            raise TrackerError(f"conv: channels {c}->{self.out_channels} not divisible by groups {self.groups}")
        out = [_window_out(s, k, st, p, "conv") for s, k, st, p in zip(spatial, self.kernel, self.stride, self.padding)]
        return (self.out_channels, *out)

    def weight_shape(self, inputs: list[Shape]) -> Shape:
        return (self.out_channels, inputs[0][0] // self.groups, *self.kernel)

    def biases(self) -> int:
        return self.out_channels if self.bias else 0


@dataclass(frozen=True)
class ConvTranspose(LayerOp):
    """N-d transposed convolution (the U-Net up-convolution), no padding."""

    kind: ClassVar[str] = "convtranspose"
    has_weights: ClassVar[bool] = True
    out_channels: int
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    bias: bool = True

    def infer(self, inputs: list[Shape]) -> Shape:
        _, *spatial = _only(inputs, self.kind)
        out = [(s - 1) * st + k for s, k, st in zip(spatial, self.kernel, self.stride)]
        return (self.out_channels, *out)

    def weight_shape(self, inputs: list[Shape]) -> Shape:
        return (inputs[0][0], self.out_channels, *self.kernel)

    def biases(self) -> int:
        return self.out_channels if self.bias else 0


@dataclass(frozen=True)
class Linear(LayerOp):
    """Fully-connected layer; a multi-dimensional input is flattened (AlexNet's pool5 -> fc6)."""

    kind: ClassVar[str] = "linear"
    has_weights: ClassVar[bool] = True
    out_features: int
    bias: bool = True

    def infer(self, inputs: list[Shape]) -> Shape:
        _only(inputs, self.kind)
        return (self.out_features,)

    def weight_shape(self, inputs: list[Shape]) -> Shape:
        return (self.out_features, numel(inputs[0]))

    def biases(self) -> int:
        return self.out_features if self.bias else 0


@dataclass(frozen=True)
class Elementwise(LayerOp):
    def infer(self, inputs: list[Shape]) -> Shape:
        return _only(inputs, self.kind)


@dataclass(frozen=True)
class ReLU(Elementwise):
    kind: ClassVar[str] = "relu"


@dataclass(frozen=True)
class Sigmoid(Elementwise):
    """Output activation; its backward is fused with the binary cross-entropy loss."""

    kind: ClassVar[str] = "sigmoid"


@dataclass(frozen=True)
class Softmax(Elementwise):
    """Softmax over channels at each position (a 3-D U-Net's: each voxel, with a label of its own);
    its backward is fused with the cross-entropy loss (paper 003)."""

    kind: ClassVar[str] = "softmax"


@dataclass(frozen=True)
class LRN(Elementwise):
    """Local response normalisation across channels (AlexNet): x / (k + alpha/n * sum x^2)^beta."""

    kind: ClassVar[str] = "lrn"
    size: int = 5
    alpha: float = 1e-4
    beta: float = 0.75
    k: float = 2.0


@dataclass(frozen=True)
class BatchNorm(Elementwise):
    """Batch normalisation in training mode (batch statistics), learned scale and shift."""

    kind: ClassVar[str] = "batchnorm"
    has_weights: ClassVar[bool] = True

    def weight_shape(self, inputs: list[Shape]) -> Shape:
        return (inputs[0][0],)

    def params(self, inputs: list[Shape]) -> int:
        return 2 * inputs[0][0]


@dataclass(frozen=True)
class MaxPool(LayerOp):
    kind: ClassVar[str] = "maxpool"
    kernel: tuple[int, ...]
    stride: tuple[int, ...]

    def infer(self, inputs: list[Shape]) -> Shape:
        c, *spatial = _only(inputs, self.kind)
        return (c, *[_window_out(s, k, st, 0, "maxpool") for s, k, st in zip(spatial, self.kernel, self.stride)])


@dataclass(frozen=True)
class Upsample(LayerOp):
    """Nearest-neighbour up-sampling by an integer factor in every spatial dimension."""

    kind: ClassVar[str] = "upsample"
    scale: int = 2

    def infer(self, inputs: list[Shape]) -> Shape:
        c, *spatial = _only(inputs, self.kind)
        return (c, *[s * self.scale for s in spatial])


@dataclass(frozen=True)
class Concat(LayerOp):
    """Channel concatenation (U-Net skip connections)."""

    kind: ClassVar[str] = "concat"

    def infer(self, inputs: list[Shape]) -> Shape:
        spatial = {s[1:] for s in inputs}
        if len(inputs) < 2 or len(spatial) != 1:
            raise TrackerError(f"concat needs two or more inputs of one spatial size, got {inputs}")
        return (sum(s[0] for s in inputs), *inputs[0][1:])


@dataclass(frozen=True)
class Module(LayerOp):
    """One call of a leaf module of a user's own PyTorch model (``tracker profile --torch``), as
    it was recorded: the module's class, the output shape it produced (per sample), its parameter
    count, and the FLOPs ``torch.utils.flop_counter`` counted per phase at the example's batch, or
    for a module our networks have a layer for (``ours``: relu, batchnorm, maxpool), the ops that
    layer's convention counts."""

    kind: ClassVar[str] = "module"
    type: str  # the module's class, e.g. Conv2d
    output: Shape
    weights: int = 0  # parameters it learns
    flops: tuple[tuple[str, int], ...] = ()  # (phase, FLOPs of ``counted_at`` samples)
    counted_at: int = 1
    ours: str = ""  # the kind of ours that counted its ops; '': flop_counter did

    def infer(self, inputs: list[Shape]) -> Shape:
        return self.output

    def counted_as(self) -> str:
        return self.ours or self.kind

    def params(self, inputs: list[Shape]) -> int:
        return self.weights

    def weighted(self) -> bool:
        return self.weights > 0

    def label(self) -> str:
        return self.type.lower()  # conv2d, batchnorm2d, ...: the cost formula is still 'module'


@dataclass(frozen=True)
class Layer:
    """One layer of a network, with its shapes resolved. ``id`` counts from 1 in network order."""

    id: int
    name: str
    op: LayerOp
    inputs: tuple[str, ...]
    input_shapes: tuple[Shape, ...]
    output_shape: Shape
    params: int
    needs_input_grad: bool

    @property
    def kind(self) -> str:
        return self.op.label()

    @property
    def phases(self) -> tuple[str, ...]:
        """fwd always; bwd_data unless nothing upstream needs a gradient; bwd_weight if it has weights."""
        return (
            ("fwd",)
            + (("bwd_data",) if self.needs_input_grad else ())
            + (("bwd_weight",) if self.op.weighted() else ())
        )

    def to_dict(self) -> dict:
        return {
            "layer_id": self.id,
            "layer": self.name,
            "kind": self.kind,
            "inputs": list(self.inputs),
            "input_shapes": [list(s) for s in self.input_shapes],
            "output_shape": list(self.output_shape),
            "params": self.params,
            "phases": list(self.phases),
            "attributes": self.op.attrs(),
        }


INPUT = "input"


@dataclass
class Network:
    """A network: its input shape, layers in network order, the options that built it and notes."""

    name: str
    input_shape: Shape
    options: dict
    notes: list[str] = field(default_factory=list)
    layers: list[Layer] = field(default_factory=list)

    def add(self, name: str, op: LayerOp, *inputs: str) -> str:
        """Append a layer fed by ``inputs`` (default: the previous layer); return its name."""
        sources = inputs or (self.layers[-1].name if self.layers else INPUT,)
        shapes = tuple(self.shape_of(src) for src in sources)
        try:
            out = op.infer(list(shapes))
        except TrackerError as exc:
            raise TrackerError(f"{self.name}: layer {name}: {exc}") from None
        grad = any(src != INPUT for src in sources)
        self.layers.append(Layer(len(self.layers) + 1, name, op, sources, shapes, out, op.params(list(shapes)), grad))
        return name

    def shape_of(self, name: str) -> Shape:
        if name == INPUT:
            return self.input_shape
        for layer in self.layers:
            if layer.name == name:
                return layer.output_shape
        raise TrackerError(f"{self.name}: no layer named {name}")

    def layer(self, name: str) -> Layer:
        return next(layer for layer in self.layers if layer.name == name)

    def training_order(self, phases: str = "both") -> list[tuple[Layer, str]]:
        """The layer phases of a training step in the order they run: forward through the layers,
        then backward in reverse (per layer: weight gradient, then data gradient). ``phases``:
        fwd, bwd or both. Our plan and the library arm both run this order."""
        order: list[tuple[Layer, str]] = []
        if phases in ("fwd", "both"):
            order += [(layer, "fwd") for layer in self.layers]
        if phases in ("bwd", "both"):
            order += [
                (layer, phase) for layer in reversed(self.layers) for phase in BACKWARD_ORDER if phase in layer.phases
            ]
        return order

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def grouped_convolutions(self) -> bool:
        return any(isinstance(layer.op, Conv) and layer.op.groups > 1 for layer in self.layers)

    def to_dict(self) -> dict:
        return {
            "network": self.name,
            "input_shape": list(self.input_shape),
            "options": self.options,
            "params": self.params,
            "grouped_convolutions": self.grouped_convolutions,
            "notes": self.notes,
            "layers": [layer.to_dict() for layer in self.layers],
        }


def conv(
    out: int, kernel: int, stride: int = 1, pad: int = 0, dims: int = 2, groups: int = 1, bias: bool = True
) -> Conv:
    """A convolution with the same kernel, stride and padding in every spatial dimension."""
    return Conv(out, _tuple(kernel, dims), _tuple(stride, dims), _tuple(pad, dims), groups, bias)


def maxpool(kernel: int, stride: int, dims: int = 2) -> MaxPool:
    return MaxPool(_tuple(kernel, dims), _tuple(stride, dims))
