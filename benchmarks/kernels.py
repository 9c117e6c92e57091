"""Kernel benchmark (needs a GPU, CuPy and PyTorch; not a test): per AlexNet layer and phase at
batch 128, every variant's median time against cuDNN / cuBLAS through PyTorch (fp32, TF32 off),
and the memory-bound ops' effective bandwidth (compulsory bytes / time) against a device-to-
device copy of the same byte count. L2 is flushed before every repetition (cold-L2 times).
Writes benchmarks/RESULTS.md with the GPU, driver and date.

    python benchmarks/kernels.py [--batch 128] [--reps 20] [--out benchmarks/RESULTS.md]

NOT YET RUN ON A GPU: the first session with one runs it (tools/gpu_session.sh).
"""

from __future__ import annotations

import argparse
import statistics
from datetime import date
from pathlib import Path

import cupy as cp
import numpy as np
import torch
import torch.nn.functional as F

from tracker.gpu import launchers as L
from tracker.gpu.cupy_backend import CupyBackend, device_info
from tracker.gpu.kernels import VARIANTS
from tracker.gpu.selftest import Case, network_cases
from tracker.model import costs
from tracker.nets import build

TARGETS = {"conv": 1.5, "linear": 1.3}  # best variant within this factor of cuDNN / cuBLAS
BANDWIDTH_TARGET = 0.85  # memory-bound ops: share of the measured copy bandwidth
MEMORY_BOUND = ("relu", "maxpool", "lrn", "softmax")


class Timer:
    """Median and spread of a callable's GPU time over ``reps``, L2 flushed before each."""

    def __init__(self, reps: int):
        self.reps = reps
        l2 = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["l2CacheSize"]
        self.scrub = cp.empty(2 * l2 // 4, dtype=cp.float32)

    def __call__(self, fn) -> tuple[float, float]:
        fn()  # warm-up: compiles, allocates
        times = []
        for _ in range(self.reps):
            self.scrub.fill(0)
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end))
        median = statistics.median(times)
        return median, (max(times) - min(times)) / median


def tensors(case: Case, rng) -> dict:
    """CuPy inputs and outputs of every phase of a case (the same arrays serve each variant)."""
    s, f32 = case.shapes, lambda *shape: cp.asarray(rng.normal(size=shape).astype(np.float32))
    t = {"x": f32(*s["x"])}
    if case.op in ("conv", "linear"):
        t.update(w=f32(*s["w"]) * 0.01, b=f32(s["w"][0]))
    return t


def ours(backend, case: Case, variant: str, phase: str, t: dict):
    """A callable launching one variant's kernels for one phase."""
    s = case.shapes
    x = t["x"]
    if case.op == "conv":
        y = t.setdefault("y", cp.empty((s["x"][0], s["w"][0], *_conv_out(s)), cp.float32))
        dy, dx = t.setdefault("dy", cp.ones_like(y)), t.setdefault("dx", cp.empty_like(x))
        dw, db = t.setdefault("dw", cp.empty_like(t["w"])), t.setdefault("db", cp.empty_like(t["b"]))
        return {"fwd": lambda: L.conv_fwd(backend, variant, x, t["w"], t["b"], y, s["stride"], s["pad"]),
                "bwd_data": lambda: L.conv_bwd_data(backend, variant, dy, t["w"], dx, s["stride"], s["pad"], y),
                "bwd_weight": lambda: L.conv_bwd_weight(backend, variant, dy, x, dw, db, s["stride"], s["pad"], y),
                }[phase]
    if case.op == "linear":
        y = t.setdefault("y", cp.empty((s["x"][0], s["w"][0]), cp.float32))
        dy, dx = t.setdefault("dy", cp.ones_like(y)), t.setdefault("dx", cp.empty_like(x))
        dw, db = t.setdefault("dw", cp.empty_like(t["w"])), t.setdefault("db", cp.empty_like(t["b"]))
        return {"fwd": lambda: L.linear_fwd(backend, variant, x, t["w"], t["b"], y),
                "bwd_data": lambda: L.linear_bwd_data(backend, variant, dy, t["w"], dx, y),
                "bwd_weight": lambda: L.linear_bwd_weight(backend, variant, dy, x, dw, db, y)}[phase]
    if case.op == "maxpool":
        y = t.setdefault("y", cp.empty((*s["x"][:2], *_pool_out(s)), cp.float32))
        dy, dx = t.setdefault("dy", cp.ones_like(y)), t.setdefault("dx", cp.empty_like(x))
        return {"fwd": lambda: L.maxpool_fwd(backend, variant, x, y, s["size"], s["stride"]),
                "bwd_data": lambda: L.maxpool_bwd(backend, variant, dy, x, dx, s["size"], s["stride"])}[phase]
    y, dy, dx = (t.setdefault(k, cp.empty_like(x)) for k in ("y", "dy", "dx"))
    if case.op == "relu":
        return {"fwd": lambda: L.relu_fwd(backend, variant, x, y),
                "bwd_data": lambda: L.relu_bwd(backend, variant, dy, y, dx)}[phase]
    if case.op == "lrn":
        p = {k: s[k] for k in ("size", "alpha", "beta", "k")}
        return {"fwd": lambda: L.lrn_fwd(backend, variant, x, y, **p),
                "bwd_data": lambda: L.lrn_bwd(backend, variant, dy, x, y, dx, **p)}[phase]
    labels = t.setdefault("labels", cp.zeros(s["x"][0], cp.int32))
    return {"fwd": lambda: L.softmax_fwd(backend, variant, x, y),
            "bwd_data": lambda: L.softmax_xent_bwd(backend, variant, y, labels, dx)}[phase]


def library(case: Case, phase: str):
    """cuDNN / cuBLAS through PyTorch for the same conv or linear phase."""
    s = case.shapes
    x = torch.randn(*s["x"], device="cuda")
    w = torch.randn(*s["w"], device="cuda") * 0.01
    if case.op == "conv":
        dy = torch.ones_like(F.conv2d(x, w, stride=s["stride"], padding=s["pad"]))
        return {"fwd": lambda: F.conv2d(x, w, stride=s["stride"], padding=s["pad"]),
                "bwd_data": lambda: torch.nn.grad.conv2d_input(x.shape, w, dy, s["stride"], s["pad"]),
                "bwd_weight": lambda: torch.nn.grad.conv2d_weight(x, w.shape, dy, s["stride"], s["pad"])}[phase]
    dy = torch.ones(s["x"][0], s["w"][0], device="cuda")
    return {"fwd": lambda: F.linear(x, w), "bwd_data": lambda: dy @ w, "bwd_weight": lambda: dy.t() @ x}[phase]


def torch_step(net, batch: int):
    """The same training step in PyTorch (cuDNN / cuBLAS, fp32): forward layer by layer,
    cross-entropy, backward into every parameter; the same initial parameters as ours."""
    from tracker.gpu.network import initial_parameters

    x = torch.randn(batch, *net.input_shape, device="cuda")
    labels = torch.randint(0, net.layers[-1].output_shape[0], (batch,), device="cuda")
    params = {name: [torch.tensor(a, device="cuda", requires_grad=True) for a in wb]
              for name, wb in initial_parameters(net, 0).items()}

    def step():
        acts, loss = {"input": x}, None
        for layer in net.layers:
            h, op = acts[layer.inputs[0]], layer.op
            if layer.kind == "conv":
                h = F.conv2d(h, *params[layer.name], stride=op.stride, padding=op.padding, groups=op.groups)
            elif layer.kind == "linear":
                h = F.linear(h.flatten(1), *params[layer.name])
            elif layer.kind == "relu":
                h = F.relu(h)
            elif layer.kind == "maxpool":
                h = F.max_pool2d(h, op.kernel, op.stride)
            elif layer.kind == "lrn":
                h = F.local_response_norm(h, op.size, op.alpha, op.beta, op.k)
            elif layer.kind == "softmax":
                loss = F.cross_entropy(h, labels)
            acts[layer.name] = h
        for p in params.values():
            p[0].grad = p[1].grad = None
        loss.backward()
    return step


def iteration(net, batch: int, reps: int) -> list[str]:
    """Our whole training step (default variants) against PyTorch's: CUDA-event time of one
    step, launch gaps included, median of ``reps`` after a warm-up; warm L2, as in training."""
    from tracker.gpu.network import Executor

    run = Executor(CupyBackend("ca", timed=False), net, batch, {})
    ours_ms, ours_spread = _step_time(run.iteration, reps)
    torch_ms, torch_spread = _step_time(torch_step(net, batch), reps)
    return ["", f"## Whole training iteration, batch {batch}", "",
            "| | median ms (spread) | images/s |", "|---|---|---|",
            f"| ours (default variants) | {ours_ms:.2f} ({ours_spread:.0%}) | {batch / ours_ms * 1e3:.0f} |",
            f"| PyTorch {torch.__version__} (cuDNN, cuBLAS; fp32, TF32 off) | {torch_ms:.2f} ({torch_spread:.0%}) "
            f"| {batch / torch_ms * 1e3:.0f} |",
            "", f"Ours takes {ours_ms / torch_ms:.1f}x PyTorch's time for the same step."]


def _step_time(fn, reps: int) -> tuple[float, float]:
    fn()
    cp.cuda.Device().synchronize()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        torch.cuda.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    median = statistics.median(times)
    return median, (max(times) - min(times)) / median


def _conv_out(s):
    return [(n + 2 * s["pad"] - k) // s["stride"] + 1 for n, k in zip(s["x"][2:], s["w"][2:])]


def _pool_out(s):
    return [(n - s["size"]) // s["stride"] + 1 for n in s["x"][2:]]


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--batch", type=int, default=128)
    args.add_argument("--reps", type=int, default=20)
    args.add_argument("--out", default=str(Path(__file__).with_name("RESULTS.md")))
    args.add_argument("--iteration-only", action="store_true", help="only the whole-iteration comparison")
    opts = args.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    net = build("alexnet")
    if opts.iteration_only:
        print("\n".join(iteration(net, opts.batch, opts.reps)))
        return
    timer, backend = Timer(opts.reps), CupyBackend("ca", timed=False)
    rng = np.random.default_rng(0)
    predicted = {layer.name: costs(layer, opts.batch) for layer in net.layers}
    lines = []
    for case in network_cases(net, opts.batch):
        t = tensors(case, rng)
        for phase in ("fwd", "bwd_data", "bwd_weight"):
            if phase not in predicted[case.layer]:
                continue
            timings = {v: timer(ours(backend, case, v, phase, t)) for v in VARIANTS[case.op]}
            best = min(timings, key=lambda v: timings[v][0])
            nbytes = predicted[case.layer][phase].elements * 4
            if case.op in MEMORY_BOUND:
                src = cp.empty(nbytes // 8, cp.float32)  # read half the bytes, write the other half
                dst = cp.empty_like(src)
                copy_ms, _ = timer(lambda: cp.copyto(dst, src))
                ratio, target = copy_ms / timings[best][0], f">= {BANDWIDTH_TARGET:.0%} of copy"
                met = ratio >= BANDWIDTH_TARGET
                baseline = f"copy {copy_ms:.3f} ms ({nbytes / copy_ms / 1e6:.0f} GB/s)"
            else:
                lib_ms, _ = timer(library(case, phase))
                ratio, target = timings[best][0] / lib_ms, f"<= {TARGETS[case.op]}x library"
                met = ratio <= TARGETS[case.op]
                baseline = f"{'cuDNN' if case.op == 'conv' else 'cuBLAS'} {lib_ms:.3f} ms"
            cells = " ".join(f"{v} {ms:.3f} ({spread:.0%})" for v, (ms, spread) in timings.items())
            lines.append(f"| {case.layer} | {phase} | {cells} | {best} | {baseline} | {ratio:.2f} | "
                         f"{target} | {'yes' if met else 'no'} |")
            print(lines[-1], flush=True)
    device = device_info()
    header = [
        f"# Kernel benchmark: AlexNet, batch {opts.batch}", "",
        f"{device['device_name']}, driver {device['driver_version']}, CUDA {device['cuda_version']}, "
        f"{date.today().isoformat()}; median of {opts.reps} repetitions (spread = (max - min) / median), "
        "L2 flushed before each (cold L2). PyTorch fp32 with TF32 off. Made by `python benchmarks/kernels.py`.", "",
        "| layer | phase | our variants, median ms (spread) | best | baseline | ratio | target | met |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += iteration(net, opts.batch, opts.reps)
    print("\n".join(lines[-7:]))
    Path(opts.out).write_text("\n".join(header + lines) + "\n")
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
