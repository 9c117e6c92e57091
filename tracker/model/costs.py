"""Operation counts and compulsory traffic of one layer in one phase, for a whole batch.

Counting convention (paper 003's, extended to backward and to the layers it does not count):
``ops`` counts every arithmetic or logical operation; a multiply-add is 2. ``CONVENTIONS`` says
what each kind counts; the string is stored beside every number it produced.

Traffic is compulsory: each tensor a phase needs is read once and each tensor it produces is
written once (elements; the model multiplies by the bytes per value). Caches, re-reads, im2col
buffers and launch overheads are what the measurement adds on top.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

from tracker.model.algorithms import conv_cost
from tracker.nets.layers import Layer, numel

CONVENTIONS = {
    "conv": "2 per multiply-add (C_in/groups x kernel MACs per output); bias not counted; "
    "bwd_data and bwd_weight each repeat the forward's MACs",
    "convtranspose": "2 per multiply-add (C_out x kernel MACs per input); bias not counted; "
    "bwd_data and bwd_weight each repeat the forward's MACs",
    "linear": "2 per multiply-add (in x out MACs per sample); bias not counted; "
    "bwd_data and bwd_weight each repeat the forward's MACs",
    "relu": "1 per element (max); backward 1 per element (mask select)",
    "maxpool": "window size per output (comparisons); backward window + 1 per output "
    "(each input it covers compares the saved offset of its maximum, one accumulates its gradient)",
    "lrn": "2n+4 per element, n = window (n squares, n adds, x alpha, + k, pow beta, divide); "
    "backward 3n+9 per element (normalizer recomputed 2n+2, g*y/s 2, window sum n, "
    "s^-beta and g*s^-beta 2, x*2ab/n*sum 2, subtract 1)",
    "softmax": "5 per element (max, subtract, exp, sum, divide); backward fused with cross-entropy "
    "loss: 2 per element (subtract one-hot, scale by 1/batch)",
    "sigmoid": "4 per element (negate, exp, add, divide); backward fused with binary cross-entropy "
    "loss: 2 per element (subtract target, scale)",
    "batchnorm": "7 per element (sum, sum of squares 2, subtract mean, scale by 1/sigma, "
    "gamma*x+beta 2); bwd_data 6 per element; bwd_weight 5 per element",
    "upsample": "0 (copies); backward (scale^dims - 1) adds per input element",
    "concat": "0 (copies), forward and backward",
    "module": "torch.utils.flop_counter's FLOPs of the call (a multiply-add is 2; it counts convolutions, "
    "matrix products and attention, not element-wise ops), MACs = FLOPs / 2; traffic: its inputs, "
    "output and parameters once (a batch norm, ReLU or max-pool call: as our layer of that kind)",
}

# Per-element op counts of the element-wise kinds: (forward, backward data, backward weight).
_PER_ELEMENT = {"relu": (1, 1, 0), "softmax": (5, 2, 0), "sigmoid": (4, 2, 0), "batchnorm": (7, 6, 5)}


@dataclass(frozen=True)
class Cost:
    macs: int  # of an algorithm other than direct: the multiplies of its arithmetic stage
    ops: int
    read: int  # elements
    written: int  # elements
    algorithm: str | None = None  # a conv phase costed by a named algorithm (tracker/model/algorithms.py)
    workspace: int = 0  # elements it holds, counted in read and written once each
    note: str = ""  # the algorithm's rule, or why the one asked for did not apply

    @property
    def elements(self) -> int:
        return self.read + self.written


def _macs(layer: Layer) -> int:
    """Multiply-adds of one sample's forward pass of a conv, transposed conv or linear layer."""
    op: Any = layer.op  # the kind says which LayerOp subclass
    (shape,) = layer.input_shapes
    if layer.kind == "conv":
        return numel(layer.output_shape) * (shape[0] // op.groups) * math.prod(op.kernel)
    if layer.kind == "convtranspose":
        return numel(shape) * op.out_channels * math.prod(op.kernel)
    return numel(shape) * op.out_features


def costs(layer: Layer, batch: int, algorithm: str | None = None) -> dict[str, Cost]:
    """The cost of each phase the layer runs (``layer.phases``), for ``batch`` samples; a conv
    layer's by ``algorithm`` where one is named (direct, winograd_f4, fft, ...)."""
    x = batch * sum(numel(s) for s in layer.input_shapes)  # input elements
    y = batch * numel(layer.output_shape)  # output elements
    p = layer.params
    kind, op = layer.op.kind, cast(Any, layer.op)  # the kind says which LayerOp subclass
    if kind == "conv" and algorithm is not None:
        return {phase: _by_algorithm(layer, phase, batch, algorithm, x, y, p) for phase in layer.phases}
    if kind in ("conv", "convtranspose", "linear"):
        m = batch * _macs(layer)
        w = p - layer.op.biases()
        table = {
            "fwd": Cost(m, 2 * m, x + p, y),
            "bwd_data": Cost(m, 2 * m, y + w, x),
            "bwd_weight": Cost(m, 2 * m, y + x, p),
        }
    elif kind == "maxpool":
        # The forward also writes each window's maximum as an int32 offset (our default `shared`
        # variant; PyTorch saves its indices too) and the backward reads those with dy instead of
        # x (4.1 times the output at AlexNet's pool1): an element an output, exact at fp32's width.
        window = math.prod(op.kernel)
        table = {"fwd": Cost(0, y * window, x, 2 * y), "bwd_data": Cost(0, y * (window + 1), 2 * y, x)}
    elif kind == "lrn":
        n = op.size
        table = {"fwd": Cost(0, (2 * n + 4) * y, x, y), "bwd_data": Cost(0, (3 * n + 9) * y, x + 2 * y, x)}
    elif kind == "upsample":
        dims = len(layer.output_shape) - 1
        table = {"fwd": Cost(0, 0, x, y), "bwd_data": Cost(0, x * (op.scale**dims - 1), y, x)}
    elif kind == "concat":
        table = {"fwd": Cost(0, 0, x, y), "bwd_data": Cost(0, 0, y, x)}
    elif kind == "module":  # a user's PyTorch module: the ops counted on it, scaled to the batch
        flops = {phase: n * batch // op.counted_at for phase, n in op.flops}
        read = {"fwd": x + p, "bwd_data": y + p, "bwd_weight": y + x}
        wrote = {"fwd": y, "bwd_data": x, "bwd_weight": p}
        macs = {phase: 0 if op.ours else n // 2 for phase, n in flops.items()}  # ours: no multiply-adds
        table = {phase: Cost(macs.get(phase, 0), flops.get(phase, 0), read[phase], wrote[phase]) for phase in read}
    else:
        table = _elementwise(layer, x, y, p)
    return {phase: table[phase] for phase in layer.phases}


def _by_algorithm(layer: Layer, phase: str, batch: int, algorithm: str, x: int, y: int, p: int) -> Cost:
    """A conv phase by a named algorithm: its multiplies and transforms, the compulsory traffic
    plus its workspace written and read once."""
    cost = conv_cost(layer, phase, batch, algorithm)
    read, written = {"fwd": (x + p, y), "bwd_data": (y + p - layer.op.biases(), x), "bwd_weight": (y + x, p)}[phase]
    return Cost(
        cost.multiplies,
        cost.flops,
        read + cost.workspace,
        written + cost.workspace,
        cost.algorithm,
        cost.workspace,
        cost.note,
    )


def _elementwise(layer: Layer, x: int, y: int, p: int) -> dict[str, Cost]:
    fwd, bwd_data, bwd_weight = _PER_ELEMENT[layer.kind]
    if layer.kind == "softmax":  # reads probabilities and one label per position
        bwd_read = y + y // layer.output_shape[0]
    elif layer.kind == "sigmoid":  # reads probabilities and a target per element
        bwd_read = 2 * y
    elif layer.kind == "batchnorm":  # reads x, the output gradient and gamma
        bwd_read = 2 * y + p // 2
    else:  # relu: the output gradient and the output (its mask)
        bwd_read = 2 * y
    return {
        "fwd": Cost(0, fwd * y, x + p, y),
        "bwd_data": Cost(0, bwd_data * y, bwd_read, x),
        "bwd_weight": Cost(0, bwd_weight * y, 2 * y, p),
    }
