"""A tracker network as PyTorch runs it: one training step, layer phase by layer phase.

Built from the network's own definition (``tracker.nets``: no second description of AlexNet),
with the same initial parameters as our kernels' (``gpu.network.initial_parameters``). The step
runs ``Network.training_order``, the order our plan runs, each layer phase inside a range named
as ours are (``layer/phase``):

- forward: each layer on a detached copy of its input, so that its backward is its own;
- backward, per layer in reverse: ``bwd_weight`` (``autograd.grad`` of the layer's output for
  its weight and bias only: the library runs its weight-gradient kernels) then ``bwd_data``
  (for its input only: the data-gradient kernels);
- the loss layer is fused with its loss, as our kernels and the NumPy reference do: softmax with
  the mean cross-entropy, sigmoid (the U-Nets') with the mean binary cross-entropy; its
  ``bwd_data`` is the gradient of the loss for the logits;
- a layer may read several inputs (concat) and an activation feed several layers (a U-Net's
  skip): each reader's ``bwd_data`` adds its share to the activation's gradient;
- batch normalization runs in training mode: batch statistics, the running ones updated.

fp32 by default with TF32 off (``allow_tf32``), so that it computes what our fp32 kernels do.

On a CUDA device the autograd engine runs each backward node on its own device thread, whose
NVTX stack and profiler ranges are not the caller's: a range the caller opens around
``autograd.grad`` holds none of the kernels. So each node of a layer's graph also opens the
layer phase's range on the thread that runs it (``bracket_nodes``), and Nsight Compute and
PyTorch's profiler see every backward kernel inside ``layer/phase``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from tracker.errors import TrackerError
from tracker.gpu.replay import Passes, replay_phase
from tracker.nets import Layer, Network
from tracker.nets.layers import LRN, BatchNorm, Concat, Conv, ConvTranspose, Linear, MaxPool, ReLU, Sigmoid, Upsample

Region = Callable[[str], AbstractContextManager]
KINDS = (
    "conv",
    "convtranspose",
    "linear",
    "relu",
    "maxpool",
    "lrn",
    "batchnorm",
    "upsample",
    "concat",
    "sigmoid",
    "softmax",
)  # what _forward knows
LOSSES = ("softmax", "sigmoid")


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

    def __init__(
        self,
        net: Network,
        batch: int,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
        phases: str = "both",
        region: Region | None = None,
        allow_tf32: bool = False,
    ):
        from tracker.gpu.network import initial_parameters, labels

        missing = sorted({layer.kind for layer in net.layers if layer.kind not in KINDS})
        if missing:
            raise TrackerError(f"{net.name} has layers the PyTorch build does not know: {', '.join(missing)}")
        if net.layers[-1].kind not in LOSSES:
            raise TrackerError(f"{net.name} does not end in softmax or sigmoid: the step's loss is their cross-entropy")
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
        torch.backends.cudnn.allow_tf32 = allow_tf32
        self.net, self.order = net, net.training_order(phases)
        self.region = region or (nvtx_region if torch.device(device).type == "cuda" else lambda name: nullcontext())
        self.on_engine_threads = torch.device(device).type == "cuda"  # backward nodes run on the device's thread
        self.phase = ""  # the layer phase running: what the nodes' ranges are named
        rng = np.random.default_rng(seed + 1)  # the inputs our executor makes
        as_tensor = lambda a: torch.as_tensor(a, dtype=dtype, device=device)  # noqa: E731
        self.x = as_tensor(rng.normal(size=(batch, *net.input_shape)))
        drawn = labels(net, batch, rng)  # as our executor draws them
        self.labels = (
            as_tensor(drawn)
            if net.layers[-1].kind == "sigmoid"
            else torch.as_tensor(drawn, dtype=torch.long, device=device)
        )
        self.params = {
            name: (as_tensor(w).requires_grad_(), None if b is None else as_tensor(b).requires_grad_())
            for name, (w, b) in initial_parameters(net, seed).items()
        }
        self.running = {
            layer.name: (
                torch.zeros(layer.output_shape[0], dtype=dtype, device=device),
                torch.ones(layer.output_shape[0], dtype=dtype, device=device),
            )
            for layer in net.layers
            if layer.kind == "batchnorm"
        }  # batch norm's running statistics
        self.grads: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}  # (dw, db), db None without a bias
        self.inputs: dict[str, torch.Tensor] = {}  # each layer's (first) input, as the last iteration saw it
        self.operands: dict[str, tuple[torch.Tensor, ...]] = {}  # all of them (concat reads two)
        self.loss: torch.Tensor | None = None

    def iteration(self, passes: Passes | None = None) -> None:
        """One training step. With ``passes`` (a profiler that counts in passes: CUPTI's user
        replay), each layer phase runs until the profiler has every pass, and between passes the
        gradients summed so far and a batch norm's running statistics are put back
        (tracker/gpu/replay.py); each backward keeps its graph for the next pass."""
        self.inputs, self.operands = {}, {}
        outputs: dict[str, torch.Tensor] = {"input": self.x}
        dy: dict[str, torch.Tensor] = {}  # each activation's gradient, summed over its readers
        for layer, phase in self.order:
            self.phase = f"{layer.name}/{phase}"
            run = partial(self._phase, layer, phase, outputs, dy, passes is not None)
            if passes is None:
                run()
            else:
                replay_phase(self.phase, run, self._restorer(layer, phase, dy), passes)

    def _phase(
        self, layer: Layer, phase: str, outputs: dict[str, torch.Tensor], dy: dict[str, torch.Tensor], keep_graph: bool
    ) -> None:
        with self.region(self.phase):
            if phase == "fwd":
                xs = self.operands[layer.name] = tuple(
                    outputs[source].detach().requires_grad_(layer.needs_input_grad) for source in layer.inputs
                )
                self.inputs[layer.name] = xs[0]
                outputs[layer.name] = self._forward(layer, xs)
                if self.on_engine_threads and outputs[layer.name].grad_fn is not None:
                    bracket_nodes(outputs[layer.name], lambda: self.phase, self.region)
            elif phase == "bwd_weight":
                w, b = self.params[layer.name]
                learned = (w,) if b is None else (w, b)
                got = torch.autograd.grad(outputs[layer.name], learned, dy.get(layer.name), retain_graph=True)
                self.grads[layer.name] = (got[0], got[1] if b is not None else None)
            else:
                dxs = torch.autograd.grad(
                    outputs[layer.name], self.operands[layer.name], dy.get(layer.name), retain_graph=keep_graph
                )
                for source, dx in zip(layer.inputs, dxs):
                    dy[source] = dy[source] + dx if source in dy else dx

    def _restorer(self, layer: Layer, phase: str, dy: dict[str, torch.Tensor]) -> Callable[[], None]:
        """What puts back the state ``phase`` of ``layer`` changes, as it is now: the gradients
        summed so far (replaced, never written into) and a batch norm's running statistics."""
        summed = dict(dy)
        running = self.running.get(layer.name, ()) if phase == "fwd" else ()
        saved = [t.clone() for t in running]

        def restore() -> None:
            dy.clear()
            dy.update(summed)
            for t, copy in zip(running, saved):
                t.copy_(copy)

        return restore

    def _forward(self, layer: Layer, xs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        op, x = layer.op, xs[0]
        dims = x.dim() - 2  # spatial dimensions: 2-D or 3-D
        if isinstance(op, Conv):
            w, b = self.params[layer.name]
            return (F.conv3d if dims == 3 else F.conv2d)(x, w, b, op.stride, op.padding, groups=op.groups)
        if isinstance(op, ConvTranspose):
            w, b = self.params[layer.name]
            return (F.conv_transpose3d if dims == 3 else F.conv_transpose2d)(x, w, b, op.stride)
        if isinstance(op, BatchNorm):
            w, b = self.params[layer.name]
            mean, var = self.running[layer.name]
            return F.batch_norm(x, mean, var, w, b, training=True)
        if isinstance(op, Upsample):
            return F.interpolate(x, scale_factor=op.scale, mode="nearest")
        if isinstance(op, Concat):
            return torch.cat(xs, 1)
        if isinstance(op, Sigmoid):  # fused with its loss
            self.loss = F.binary_cross_entropy_with_logits(x, self.labels)
            return self.loss
        if isinstance(op, Linear):
            w, b = self.params[layer.name]
            return F.linear(x.flatten(1), w, b)
        if isinstance(op, ReLU):
            return F.relu(x)
        if isinstance(op, MaxPool):
            return (F.max_pool3d if dims == 3 else F.max_pool2d)(x, op.kernel, op.stride)
        if isinstance(op, LRN):
            return F.local_response_norm(x, op.size, op.alpha, op.beta, op.k)
        self.loss = F.cross_entropy(x, self.labels)  # softmax at each position, fused with its loss
        return self.loss
