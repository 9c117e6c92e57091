"""PyTorch held to our selftest's bound, layer phase by layer phase.

On an H100 PyTorch's AlexNet step (``torch_net.TorchStep``, fp32, TF32 off) was 2.2e-3 from the
float64 reference in its worst gradient: errors compound along the chain, and cuDNN picks its own
algorithms, so the whole step cannot say which layer phase lost the digits. Here every layer phase
runs alone, through the very checks our kernels pass (``tracker.ops.selftest``): each op's
``check`` makes the same fresh float32 inputs and float64 references, and compares with the same
error measures and bounds, while ``TorchCheck.run`` computes the phase with the calls TorchStep
makes (each op's ``torch_forward``: F.conv2d, F.linear on the flattened input, F.relu,
F.max_pool2d, F.local_response_norm, F.cross_entropy) and its backward with ``autograd.grad``
split as TorchStep splits it (bwd_weight: weight and bias only; bwd_data: the input only).

``step_errors`` keeps the old whole-step comparison, per layer, as information: errors there are
compounded, so it decides nothing.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from tracker.errors import TrackerError
from tracker.ops import OPS
from tracker.ops.launch import Arrays, LaunchRecord
from tracker.ops.registry import Case
from tracker.ops.selftest import Check, Result, relative_errors, run_check

VARIANT = "torch"  # the selftest's variant name for PyTorch's phases


def device() -> str:
    """Where PyTorch runs the check: the GPU it sees, else the CPU (CI's wheel)."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def describe(where: str) -> str:
    """The device in words, with the libraries that computed on it."""
    if where == "cuda":
        return (
            f"{torch.cuda.get_device_name()} (torch {torch.__version__}, CUDA {torch.version.cuda}, "
            f"cuDNN {torch.backends.cudnn.version()})"
        )
    return f"the CPU (torch {torch.__version__}; no GPU seen)"


@contextmanager
def fp32() -> Iterator[None]:
    """TF32 off, as TorchStep runs by default: cuDNN and cuBLAS compute in fp32, as our kernels do."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


class Tensors:
    """The Backend a TorchCheck hands the op's check: its arrays are torch tensors on ``where``;
    nothing of ours launches on it."""

    def __init__(self, where: str):
        self.where = torch.device(where)
        self.log: list[LaunchRecord] = []
        self.context: Any = None

    def asarray(self, array: Any) -> Any:
        return torch.as_tensor(np.ascontiguousarray(array), device=self.where)  # keeps the dtype (labels int32)

    def asnumpy(self, array: Any) -> Any:
        return array.detach().cpu().numpy()

    def empty(self, shape: tuple) -> Any:
        return torch.empty(shape, dtype=torch.float32, device=self.where)

    def synchronize(self) -> None:
        if self.where.type == "cuda":
            torch.cuda.synchronize(self.where)

    def launch(
        self,
        source: str,
        kernel: str,
        grid: tuple,
        block: tuple,
        args: tuple,
        shared_bytes: int = 0,
        defines: tuple[tuple[str, int], ...] = (),
    ) -> None:
        raise TrackerError(f"{kernel}: PyTorch's selftest launches none of our kernels")

    def to_constant(self, source: str, symbol: str, array: Any) -> None:
        raise TrackerError(f"{symbol}: PyTorch's selftest launches none of our kernels")

    def slots(self, source: str, kernel: str, threads: int, defines: tuple[tuple[str, int], ...] = ()) -> int:
        raise TrackerError(f"{kernel}: PyTorch's selftest launches none of our kernels")


class TorchCheck(Check):
    """A Check whose phases PyTorch computes. The forward keeps its autograd graph (``graph``) for
    the backward phases to differentiate, as TorchStep's layer outputs do."""

    def __init__(self, tensors: Tensors, case: Case):
        super().__init__(tensors, case, VARIANT)
        self.graph: tuple[dict[str, Any], Any] | None = None  # (leaves by role, the forward's output)

    def error_scale(self) -> float:
        return 1.0  # PyTorch held to our ops' own bound

    def run(self, phase: str, arrays: Arrays, **params: Any) -> None:
        compute = _OWN.get(self.case.op, _PHASES)[phase]
        for role, value in compute(self, arrays, params).items():
            out = getattr(arrays, role)  # the check's output tensor, NaN until written
            out.copy_(value.detach().reshape(out.shape))

    def leaves(self, arrays: Arrays) -> dict[str, Any]:
        """The forward's inputs as fresh leaves that need their gradients (the tensors the check
        put stay as they are)."""
        roles = ("x", "w", "bias") if arrays.w is not None else ("x",)
        return {role: getattr(arrays, role).detach().requires_grad_() for role in roles}

    def backward(self, dy: Any, *roles: str) -> tuple:
        """autograd.grad of the forward's output for ``roles`` only: TorchStep's split of a layer's
        backward (retain_graph: the other backward phase still to come)."""
        if self.graph is None:
            raise TrackerError(f"{self.case.op}: a backward phase ran before its forward")
        leaves, y = self.graph
        return torch.autograd.grad(y, tuple(leaves[r] for r in roles), dy, retain_graph=True)


def torch_forward(op: str) -> Callable[..., Any]:
    """The op's forward as TorchStep calls it: (x, (w, bias) or None, labels, **the case's parameters)."""
    forward = OPS[op].torch_forward
    if forward is None:
        raise TrackerError(f"op {op} has no PyTorch forward to check")
    return forward


Phase = Callable[[TorchCheck, Arrays, dict], dict[str, Any]]  # -> the outputs it wrote, by role


def _fwd(c: TorchCheck, a: Arrays, params: dict) -> dict[str, Any]:
    leaves = c.leaves(a)
    weights = (leaves["w"], leaves["bias"]) if "w" in leaves else None
    y = torch_forward(c.case.op)(leaves["x"], weights, None, **params)
    c.graph = (leaves, y)
    return {"y": y}


def _bwd_data(c: TorchCheck, a: Arrays, params: dict) -> dict[str, Any]:
    (dx,) = c.backward(a.dy, "x")
    return {"dx": dx}


def _bwd_weight(c: TorchCheck, a: Arrays, params: dict) -> dict[str, Any]:
    dw, db = c.backward(a.dy, "w", "bias")
    return {"dw": dw, "db": db}


def _softmax_fwd(c: TorchCheck, a: Arrays, params: dict) -> dict[str, Any]:
    """The probabilities the check compares; TorchStep's forward goes straight to the loss."""
    return {"y": F.softmax(a.x, dim=1)}


def _softmax_bwd(c: TorchCheck, a: Arrays, params: dict) -> dict[str, Any]:
    """TorchStep's fused softmax backward: the gradient of the mean cross-entropy for the logits;
    and each row's loss, which the check compares too."""
    x, labels = a.x.detach().requires_grad_(), a.labels.long()
    (dx,) = torch.autograd.grad(torch_forward("softmax")(x, None, labels), x)
    return {"dx": dx, "loss": F.cross_entropy(x.detach(), labels, reduction="none")}


def _sigmoid_fwd(c: TorchCheck, a: Arrays, params: dict) -> dict[str, Any]:
    """The probabilities the check compares; TorchStep's forward goes straight to the loss."""
    return {"y": torch.sigmoid(a.x)}


def _sigmoid_bwd(c: TorchCheck, a: Arrays, params: dict) -> dict[str, Any]:
    """TorchStep's fused sigmoid backward: the gradient of the mean binary cross-entropy for the
    logits; and each image's mean loss, which the check compares too."""
    x = a.x.detach().requires_grad_()
    (dx,) = torch.autograd.grad(torch_forward("sigmoid")(x, None, a.labels), x)
    terms = F.binary_cross_entropy_with_logits(x.detach(), a.labels, reduction="none")
    return {"dx": dx, "loss": terms.flatten(1).mean(1)}


def _concat_fwd(c: TorchCheck, a: Arrays, params: dict) -> dict[str, Any]:
    """torch.cat of both inputs, as TorchStep joins them (torch_forward takes one input)."""
    leaves = {role: getattr(a, role).detach().requires_grad_() for role in ("x", "x2")}
    y = torch.cat((leaves["x"], leaves["x2"]), 1)
    c.graph = (leaves, y)
    return {"y": y}


def _concat_bwd(c: TorchCheck, a: Arrays, params: dict) -> dict[str, Any]:
    dx, dx2 = c.backward(a.dy, "x", "x2")
    return {"dx": dx, "dx2": dx2}


_PHASES: dict[str, Phase] = {"fwd": _fwd, "bwd_data": _bwd_data, "bwd_weight": _bwd_weight}
_SOFTMAX: dict[str, Phase] = {"fwd": _softmax_fwd, "bwd_data": _softmax_bwd}
_OWN: dict[str, dict[str, Phase]] = {  # ops whose phases TorchStep computes its own way
    "softmax": _SOFTMAX,
    "sigmoid": {"fwd": _sigmoid_fwd, "bwd_data": _sigmoid_bwd},
    "concat": {"fwd": _concat_fwd, "bwd_data": _concat_bwd},
    # a gradient summed from two readers, as autograd's engine sums it
    "accumulate": {"bwd_data": lambda c, a, params: {"dy": (a.dy + a.dx2).detach()}},
}


def check_case(tensors: Tensors, case: Case, seed: int = 0) -> list[Result]:
    """One case's every phase and output, as PyTorch computes them, against the reference."""
    if case.op not in _OWN:
        torch_forward(case.op)  # an op PyTorch cannot run fails here, before any input is made
    return run_check(TorchCheck(tensors, case), seed)


def selftest(cases: Iterable[Case], echo: Callable[[str], None], where: str | None = None) -> tuple[list[Result], str]:
    """Every case (``ops.selftest.network_cases`` or ``small_cases()``) as PyTorch runs it on
    ``where`` (default: its GPU, else the CPU): (results, the device in words)."""
    where = where or device()
    tensors = Tensors(where)
    results: list[Result] = []
    with fp32():
        for case in cases:
            echo(f"{where} {case.layer} {VARIANT}")
            results += check_case(tensors, case)
    return results, describe(where)


# The whole step, as information -------------------------------------------------------------------

STEP_COLUMNS = ("layer", "output", "error", "max_error", "mean_error", "moved_maxima", "flipped_signs")


def step_errors(net: Any, batch: int, where: str | None = None) -> list[dict]:
    """PyTorch's whole training step (TorchStep, fp32, TF32 off) against the float64 reference
    (``reference.network_step``): the loss, then each layer's dw and db, with the selftest's error
    measures. Errors here compound along the chain: information, not a check."""
    from tracker import reference
    from tracker.gpu.network import initial_parameters
    from tracker.library.torch_net import TorchStep

    step = TorchStep(net, batch, where or device())
    step.iteration()
    loss, grads = reference.network_step(
        net, initial_parameters(net, 0), step.x.cpu().numpy().astype(np.float64), step.labels.cpu().numpy()
    )
    assert step.loss is not None  # the step's last layer is softmax (TorchStep checks)
    rows = [_step_row("loss", "loss", np.array([float(step.loss.detach())]), np.array([loss]))]
    for name, expected in grads.items():
        rows += [
            _step_row(name, output, got.detach().cpu().numpy(), want)
            for output, got, want in zip(("dw", "db"), step.grads[name], expected)
            if want is not None
        ]
    return rows + _moved_routes(net, step)


def _moved_routes(net: Any, step: Any) -> list[dict]:
    """Where PyTorch's fp32 forward routes the gradient elsewhere than the float64 reference: per
    max-pool layer, the windows whose maximum lies elsewhere (``moved_maxima``), and per ReLU,
    the elements whose input has the other sign (``flipped_signs``: a pre-activation within
    rounding of zero passes a gradient the reference blocks, or blocks one it passes). Either
    moves every gradient upstream however exact each phase is (on the CPU, one pool5 window of
    AlexNet at batch 2 gave conv1's dw a 1.2e-2 error)."""
    from tracker import reference
    from tracker.gpu.network import initial_parameters

    acts = reference.activations(net, initial_parameters(net, 0), step.x.cpu().numpy())
    rows = []
    for layer in net.layers:
        if layer.kind not in ("maxpool", "relu"):
            continue
        ours, exact = step.inputs[layer.name].detach().cpu().numpy(), acts[layer.inputs[0]]
        row = {"layer": layer.name, "error": None, "max_error": None, "mean_error": None}
        if layer.kind == "maxpool":
            size, stride = layer.op.kernel[0], layer.op.stride[0]
            ours, exact = reference.maxpool_argmax(ours, size, stride), reference.maxpool_argmax(exact, size, stride)
            rows.append(row | {"output": f"windows of {exact.size}", "moved_maxima": int((ours != exact).sum())})
        else:
            rows.append(
                row | {"output": f"elements of {exact.size}", "flipped_signs": int(((ours > 0) != (exact > 0)).sum())}
            )
    return rows


def _step_row(layer: str, output: str, got: np.ndarray, expected: np.ndarray) -> dict:
    error, largest, mean = relative_errors(got, expected)
    finite = lambda value: value if math.isfinite(value) else None  # noqa: E731
    return {
        "layer": layer,
        "output": output,
        "error": finite(error),
        "max_error": finite(largest),
        "mean_error": finite(mean),
    }


def step_report(network: str = "alexnet", batch: int = 2) -> str:
    """``step_errors`` of a tracker network as CSV, led by a comment naming the device: what
    tools/gpu_stage.sh stage 6 keeps beside the per-phase selftest."""
    from tracker.nets import build

    where = device()
    with fp32():
        rows = step_errors(build(network), batch, where)
    out = io.StringIO()
    out.write(
        f"# {network} batch {batch}, PyTorch's whole step on {describe(where)} against the float64 "
        f"reference (information only: errors compound along the chain, and a max-pool window whose "
        f"maximum fp32 rounding moved, moved_maxima, or a ReLU input whose sign it flipped, "
        f"flipped_signs, sends a gradient elsewhere)\n"
    )
    writer = csv.DictWriter(out, STEP_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: f"{v:.3e}" if isinstance(v, float) else v for k, v in row.items()} for row in rows)
    return out.getvalue()
