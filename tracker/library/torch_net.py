"""A tracker network as PyTorch runs it: one training step, layer phase by layer phase.

Built from the network's own definition (``tracker.nets``: no second description of AlexNet),
with the same initial parameters as our kernels' (``gpu.network.initial_parameters``). The step
runs ``Network.training_order``, the order our plan runs, each layer phase inside a range named
as ours are (``layer/phase``):

- forward: each layer on a detached copy of its input, so that its backward is its own;
- backward, per layer in reverse: ``bwd_weight`` (``autograd.grad`` of the layer's output for
  its weight and bias only: the library runs its weight-gradient kernels) then ``bwd_data``
  (for its input only: the data-gradient kernels);
- softmax is fused with the mean cross-entropy loss, as our kernels and the NumPy reference do:
  its ``bwd_data`` is the gradient of the loss for the logits.

fp32 by default with TF32 off (``allow_tf32``), so that it computes what our fp32 kernels do.

On a CUDA device the autograd engine runs each backward node on its own device thread, whose
NVTX stack and profiler ranges are not the caller's: a range the caller opens around
``autograd.grad`` holds none of the kernels. So each node of a layer's graph also opens the
layer phase's range on the thread that runs it (``bracket_nodes``), and Nsight Compute and
PyTorch's profiler see every backward kernel inside ``layer/phase``.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager, nullcontext
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from tracker.errors import TrackerError
from tracker.nets import Layer, Network
from tracker.nets.layers import LRN, Conv, Linear, MaxPool, ReLU

Region = Callable[[str], AbstractContextManager]
KINDS = ("conv", "linear", "relu", "maxpool", "lrn", "softmax")  # what forward() knows


def nvtx_region(name: str) -> AbstractContextManager:
    """An NVTX push/pop range, as our CuPy backend opens one around each layer phase."""
    return torch.cuda.nvtx.range(name)


def bracket_nodes(output: torch.Tensor, name: Callable[[], str], region: Region) -> None:
    """Open ``region(name())`` around every node of ``output``'s autograd graph, on the thread
    that runs the node (the engine's device thread on CUDA), and close it when the node is done."""
    opened = threading.local()

    def before(grad_outputs) -> None:
        context = region(name())
        context.__enter__()
        opened.__dict__.setdefault("stack", []).append(context)

    def after(grad_inputs, grad_outputs) -> None:
        opened.stack.pop().__exit__(None, None, None)

    seen: set = set()
    stack = [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen or type(node).__name__ == "AccumulateGrad":  # a leaf: autograd.grad captures it
            continue
        seen.add(node)
        node.register_prehook(before)
        node.register_hook(after)
        stack.extend(child for child, _ in node.next_functions)


class TorchStep:
    """One training step of ``net`` at ``batch`` in PyTorch. ``region``: the range opened around
    each layer phase (default: NVTX on a CUDA device, none on the CPU)."""

    def __init__(self, net: Network, batch: int, device: str = "cpu", dtype: torch.dtype = torch.float32,
                 seed: int = 0, phases: str = "both", region: Region | None = None, allow_tf32: bool = False):
        from tracker.gpu.network import initial_parameters

        missing = sorted({layer.kind for layer in net.layers if layer.kind not in KINDS})
        if missing:
            raise TrackerError(f"{net.name} has layers the PyTorch build does not know: {', '.join(missing)}")
        if len(net.input_shape) != 3:
            raise TrackerError(f"{net.name} is not 2-D (input {net.input_shape}): the PyTorch build runs 2-D nets")
        if net.layers[-1].kind != "softmax":
            raise TrackerError(f"{net.name} does not end in softmax: the step's loss is softmax cross-entropy")
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
        torch.backends.cudnn.allow_tf32 = allow_tf32
        self.net, self.order = net, net.training_order(phases)
        self.region = region or (nvtx_region if torch.device(device).type == "cuda" else lambda name: nullcontext())
        self.on_engine_threads = torch.device(device).type == "cuda"  # backward nodes run on the device's thread
        self.phase = ""  # the layer phase running: what the nodes' ranges are named
        rng = np.random.default_rng(seed + 1)  # the inputs our executor makes
        as_tensor = lambda a: torch.as_tensor(a, dtype=dtype, device=device)  # noqa: E731
        self.x = as_tensor(rng.normal(size=(batch, *net.input_shape)))
        classes = net.layers[-1].output_shape[0]
        self.labels = torch.as_tensor(rng.integers(0, classes, size=batch), dtype=torch.long, device=device)
        self.params = {name: (as_tensor(w).requires_grad_(), as_tensor(b).requires_grad_())
                       for name, (w, b) in initial_parameters(net, seed).items()}
        self.grads: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.inputs: dict[str, torch.Tensor] = {}  # each layer's input, as the last iteration saw it
        self.loss: torch.Tensor | None = None

    def iteration(self) -> None:
        inputs = self.inputs = {}
        outputs: dict[str, torch.Tensor] = {"input": self.x}
        dy: dict[str, torch.Tensor | None] = {}
        for layer, phase in self.order:
            self.phase = f"{layer.name}/{phase}"
            with self.region(self.phase):
                if phase == "fwd":
                    source = layer.inputs[0]
                    x = inputs[layer.name] = outputs[source].detach().requires_grad_(layer.needs_input_grad)
                    outputs[layer.name] = self._forward(layer, x)
                    if self.on_engine_threads and outputs[layer.name].grad_fn is not None:
                        bracket_nodes(outputs[layer.name], lambda: self.phase, self.region)
                elif phase == "bwd_weight":
                    w, b = self.params[layer.name]
                    dw, db = torch.autograd.grad(outputs[layer.name], (w, b), dy.get(layer.name), retain_graph=True)
                    self.grads[layer.name] = (dw, db)
                else:
                    (dx,) = torch.autograd.grad(outputs[layer.name], inputs[layer.name], dy.get(layer.name))
                    dy[layer.inputs[0]] = dx

    def _forward(self, layer: Layer, x: torch.Tensor) -> torch.Tensor:
        op = layer.op
        if isinstance(op, Conv):
            w, b = self.params[layer.name]
            return F.conv2d(x, w, b, op.stride, op.padding, groups=op.groups)
        if isinstance(op, Linear):
            w, b = self.params[layer.name]
            return F.linear(x.flatten(1), w, b)
        if isinstance(op, ReLU):
            return F.relu(x)
        if isinstance(op, MaxPool):
            return F.max_pool2d(x, op.kernel, op.stride)
        if isinstance(op, LRN):
            return F.local_response_norm(x, op.size, op.alpha, op.beta, op.k)
        self.loss = F.cross_entropy(x.flatten(1), self.labels)  # softmax, fused with its loss
        return self.loss
