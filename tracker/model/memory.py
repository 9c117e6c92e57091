"""Peak memory of one training step (paper 002's activations + weights model, extended).

Paper 002 predicts peak memory as activation maps plus model weights and shows that this falls
short of the measured peak. We add what a training step also holds: weight gradients, the
largest pair of activation gradients alive at once, the workspace of a GEMM convolution, and the
index of each window's maximum that a max-pool's forward saves for its backward.
What is still missing (allocator rounding and caching, library workspaces, the CUDA context) is
what the GPU runner's measured peak shows beside this prediction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, cast

from tracker import units
from tracker.model.algorithms import check_algorithm, col_images, conv_cost
from tracker.model.roofline import MAX_BATCH, check_batch, check_dtype_bits
from tracker.nets import Network, numel

INDEX_BYTES = 4  # a max-pool's saved maximum: an int32 offset an output element (Arrays.argmax)


@dataclass(frozen=True)
class Memory:
    param_bytes: int  # weights and biases
    activation_bytes: int  # the input and every layer output, kept for the backward pass
    pool_index_bytes: int  # each max-pool's saved maxima, kept for its backward (the default `shared`
    # variant's; `global` keeps none, and PyTorch int64 ones, twice these)
    weight_grad_bytes: int  # one gradient per parameter
    activation_grad_bytes: int  # the largest (output gradient + input gradient) of one layer
    workspace_bytes: int  # the largest im2col buffer (GEMM convolution: a chunk of images, see col_images;
    # 2-D convolutions only, as our `gemm` variant), or with an algorithm named, its largest workspace
    # (tracker/model/algorithms.py)
    peak_bytes: int

    def to_dict(self) -> dict:
        return asdict(self)


def memory(net: Network, batch: int, dtype_bits: int = 32, algorithm: str | Mapping[str, str] | None = None) -> Memory:
    """The peak of one training step; with ``algorithm``, its workspace is that convolution
    algorithm's largest (tracker/model/algorithms.py) instead of our gemm variant's im2col chunk:
    one algorithm for every conv phase, or one per 'layer/phase' (a plan's; a phase it does not
    name holds no workspace, as the implicit GEMM holds none)."""
    check_batch(batch)
    width = check_dtype_bits(dtype_bits) // 8
    params = net.params * width
    layers = net.layers
    activations = batch * (numel(net.input_shape) + sum(numel(layer.output_shape) for layer in layers)) * width
    pool_indices = batch * sum(numel(layer.output_shape) for layer in layers if layer.kind == "maxpool") * INDEX_BYTES
    act_grads = (
        max(
            batch * (numel(layer.output_shape) + (sum(map(numel, layer.input_shapes)) if layer.needs_input_grad else 0))
            for layer in layers
        )
        * width
    )
    workspace = (
        _algorithm_workspace(net, batch, algorithm)
        if algorithm is not None
        else max(
            (
                col_images(batch, per_image) * per_image
                for layer in layers
                if _im2col(layer)
                for conv in [cast(Any, layer.op)]
                for per_image in [
                    numel(layer.output_shape[1:]) * (layer.input_shapes[0][0] // conv.groups) * math.prod(conv.kernel)
                ]
            ),
            default=0,
        )
    ) * width
    peak = params + activations + pool_indices + params + act_grads + workspace
    return Memory(params, activations, pool_indices, params, act_grads, workspace, peak)


PARTS = {
    "param_bytes": "weights",
    "activation_bytes": "activations",
    "pool_index_bytes": "max-pool indices",
    "weight_grad_bytes": "weight gradients",
    "activation_grad_bytes": "activation gradients",
    "workspace_bytes": "workspace",
}  # Memory's parts, named


def largest_batch(net: Network, capacity_bytes: float, dtype_bits: int = 32) -> int:
    """The largest batch (up to MAX_BATCH) whose predicted peak fits in ``capacity_bytes``; 0 where
    not even one image does. The peak grows with the batch (the im2col chunk can shrink a little
    as chunks are added, never by a whole image's activations), so a bisection finds it."""

    def fits(batch: int) -> bool:
        return memory(net, batch, dtype_bits).peak_bytes <= capacity_bytes

    low, high = 0, MAX_BATCH  # fits(low) holds (0: vacuously); find the last batch that fits
    if fits(high):
        return high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def _im2col(layer) -> bool:
    """Whether our GEMM convolution (the conv `gemm` variant) can run ``layer``: a 2-D convolution.
    A 3-D one has no im2col variant (on an H200 the 3-D U-Net at 128^3 was predicted 14.5 GB of
    im2col that nothing allocates: 21.2 GB against 11.5 measured, tests/data/gpu-2026-11-26f-h200)."""
    return layer.op.kind == "conv" and len(layer.output_shape) == 3


def _algorithm_workspace(net: Network, batch: int, algorithm: str | Mapping[str, str]) -> int:
    """The largest workspace, in elements, of any conv phase run by ``algorithm`` (by each phase's)."""
    named = algorithm if isinstance(algorithm, Mapping) else None
    return max(
        (
            conv_cost(layer, phase, batch, check_algorithm(named[key] if named else cast(str, algorithm))).workspace
            for layer in net.layers
            if layer.op.kind == "conv"
            for phase in layer.phases
            if named is None or (key := f"{layer.name}/{phase}") in named
        ),
        default=0,
    )


@dataclass(frozen=True)
class PeakMemory:
    """The model's peak memory of a run's training step, as predicted when the run was recorded (the
    run's ``predicted_peak_bytes``: a PyTorch model's can be predicted only then, and a run is never
    rewritten when the model changes), beside the measured high-water mark."""

    predicted_bytes: int | None
    measured_bytes: int | None

    @classmethod
    def of(cls, predicted, measured) -> PeakMemory:
        """From the run's two stored columns (None or NaN where absent)."""
        return cls(
            None if units.is_missing(predicted) else int(predicted),
            None if units.is_missing(measured) or not measured else int(measured),
        )

    @property
    def ratio(self) -> float | None:
        """Measured over predicted (above 1: the GPU held more than the model counts)."""
        return self.measured_bytes / self.predicted_bytes if self.measured_bytes and self.predicted_bytes else None

    def line(self) -> str:
        """'the model's 1.86 GB; measured 2.54 GB (1.36x the model)': the same on every surface."""
        text = f"the model's {units.nbytes(self.predicted_bytes)}" if self.predicted_bytes else "no prediction stored"
        if self.measured_bytes:
            text += f"; measured {units.nbytes(self.measured_bytes)}"
        if self.ratio is not None:
            text += f" ({units.ratio(self.ratio)} the model)"
        return text
