"""The library arm's launch log, read from PyTorch profiler traces.

The kernels are real: a public Kineto trace of AlexNet's forward pass under PyTorch on an A100
(tests/data/public/SOURCES.md), where cuDNN ran conv1 as a precomputed implicit GEMM, conv2 as
an FFT and conv3-5 as TF32 implicit GEMMs. Its ranges are the PARAM benchmark's, not ours; where
a test needs ours, ``rehomed`` (tests/public_trace.py) adds ``user_annotation`` spans named as our
layer phases around chosen runs of its kernels' launches (and says so): every kernel event is left
as recorded.
"""

from __future__ import annotations

import pytest
from public_trace import SMALL_NET_RANGES, TRACE, rehomed
from samples import small_net

from tracker.library import kineto
from tracker.nets import build

MEASURED = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"
WARMUP = "[param|pytorch.model.alex_net|0|0|0|warmup|forward]"


@pytest.fixture(scope="module")
def trace() -> dict:
    return kineto.load(TRACE)


def test_every_kernel_is_read_with_its_launch_geometry_and_device_time(trace):
    kernels = kineto.kernels(trace)
    assert len(kernels) == 79
    correlations = [k.correlation for k in kernels]
    assert correlations == sorted(correlations)  # launch order
    first = kernels[1]  # conv1's offsets, the warm-up's first cuDNN launch
    assert first.name == "void cask_cudnn::computeOffsetsKernel<false, false>(cask_cudnn::ComputeOffsetsParams)"
    assert (first.grid, first.block, first.registers, first.shared_bytes) == ((12, 1, 1), (256, 1, 1), 16, 0)
    conv1 = kernels[2]
    assert conv1.name == "cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1"
    assert (conv1.grid, conv1.registers, conv1.shared_bytes, conv1.time_ms) == ((3025, 1, 1), 160, 16384, 1.035)


def test_a_kernel_belongs_to_the_innermost_range_around_its_launch(trace):
    """The warm-up forward is nested in another of the same name (around it and a cache clear):
    its kernels go to the inner one; the first kernel (a random fill) ran before either."""
    kernels = kineto.kernels(trace)
    assert kernels[0].annotation.name == "[param|cuda]"
    warmups = [a["ts"] for a in trace["traceEvents"] if a.get("cat") == "user_annotation" and a["name"] == WARMUP]
    assert len(warmups) == 2
    inner = max(warmups)
    assert [k.annotation.start_us for k in kernels[1:40]] == [inner] * 39
    assert [k.annotation.name for k in kernels[40:]] == [MEASURED] * 39
    assert [k.name for k in kernels[1:40]] == [k.name for k in kernels[40:]]  # the same forward twice


def test_outside_our_ranges_nothing_is_placed_and_everything_is_reported(trace):
    launches, outside = kineto.launch_log(kineto.kernels(trace), build("alexnet"), "torch")
    assert launches == [] and len(outside) == 79


def test_each_layer_phase_gets_its_launches_repeats_algorithm_and_roles(trace):
    net = small_net()
    launches, outside = kineto.launch_log(kineto.kernels(rehomed(trace, SMALL_NET_RANGES)), net, "torch")
    per_pass = sum(last - first + 1 for first, last in SMALL_NET_RANGES.values())
    assert len(launches) == 2 * per_pass and len(outside) == 79 - 2 * per_pass
    assert [k.invocation for k in launches] == list(range(len(launches)))
    assert [k.repeat for k in launches] == [0] * per_pass + [1] * per_pass
    by_range: dict[str, list] = {}
    for k in launches[per_pass:]:
        by_range.setdefault(k.range, []).append(k)
    assert list(by_range) == list(SMALL_NET_RANGES)
    algorithms = {name: {k.algorithm for k in ks} for name, ks in by_range.items()}
    assert algorithms == {
        "conv1/fwd": {"implicit_precomp_gemm"},
        "relu1/fwd": {None},
        "pool1/fwd": {None},
        "conv2/fwd": {"fft"},
        "relu2/fwd": {None},
        "fc3/fwd": {"gemm"},
        "relu3/fwd": {None},
        "fc4/fwd": {"gemm"},
    }
    roles = {name: [k.role for k in ks] for name, ks in by_range.items()}
    assert roles["conv1/fwd"] == ["offsets", "math"]
    assert roles["conv2/fwd"] == ["transform", "transform", "math", "transform"]  # FFT in, products, FFT out
    assert roles["fc3/fwd"] == ["math", "epilogue"]
    assert roles["relu1/fwd"] == ["math"]  # an element-wise kernel is the ReLU's math
    conv2 = by_range["conv2/fwd"][2]
    assert (conv2.kernel_name, conv2.layer_id, conv2.phase, conv2.variant) == (
        "ampere_gcgemm_64x64_nt",
        5,
        "fwd",
        "torch",
    )
    assert conv2.time_ms == pytest.approx(0.323)


def test_a_step_on_the_cpu_leaves_our_ranges_in_pytorchs_trace_in_training_order(tmp_path):
    """A real trace from the PyTorch installed here: the ranges TorchStep opens come out as the
    user_annotations the reader places kernels by, named and ordered as our plan."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    from tracker.library.torch_net import TorchStep

    net = small_net()
    step = TorchStep(net, 2, region=torch.profiler.record_function)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step.iteration()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = kineto.load(path)["traceEvents"]
    names = [e["name"] for e in sorted(events, key=lambda e: e.get("ts", 0)) if e.get("cat") == "user_annotation"]
    assert names == [f"{layer.name}/{phase}" for layer, phase in net.training_order()]


def test_an_unreadable_trace_is_one_clear_error(tmp_path):
    from tracker.errors import TrackerError

    bad = tmp_path / "trace.json"
    bad.write_text("{not json")
    with pytest.raises(TrackerError, match="cannot read the PyTorch profiler trace"):
        kineto.load(bad)


def test_the_layer_phases_that_launched_nothing_are_named_in_training_order(trace):
    """The public trace runs nothing under lrn1/fwd or softmax/fwd of the small net (AlexNet there
    has neither); a layer phase missing from one iteration only is named too."""
    net = small_net()
    launches, _ = kineto.launch_log(kineto.kernels(rehomed(trace, SMALL_NET_RANGES)), net, "torch")
    assert kineto.without_kernels(launches, net, "fwd", 2) == ["lrn1/fwd", "softmax/fwd"]
    first_only = [k for k in launches if not (k.range == "relu2/fwd" and k.repeat == 1)]
    assert kineto.without_kernels(first_only, net, "fwd", 2) == ["lrn1/fwd", "relu2/fwd", "softmax/fwd"]


def test_a_copy_in_a_layer_phases_range_is_its_launch_timed_with_no_grid():
    """PyTorch concatenates 5-D tensors by copying each input into its slice; at batch 1 the slice
    is contiguous and the copy a device-to-device cudaMemcpyAsync, which the trace logs as a
    ``gpu_memcpy``, not a kernel (a 3-D U-Net's concatenation forward on an H200 launched no kernel:
    tests/data/gpu-2026-11-26f-h200). Pass 1 logs it as its layer phase's launch, with its time and
    the role ``copy``; a copy outside every range is reported as a kernel outside is."""

    def event(cat, name, ts, dur, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}

    trace = {
        "traceEvents": [
            event("cuda_runtime", "cudaMemcpyAsync", 5, 2, correlation=7),  # the batch's labels, before any range
            event("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 6, 3, correlation=7, bytes=64),
            event("user_annotation", "concat1/fwd", 10, 20),
            event("cuda_runtime", "cudaMemcpyAsync", 12, 2, correlation=8),
            event("cuda_runtime", "cudaMemcpyAsync", 15, 2, correlation=9),
            event("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 20, 150.5, correlation=8, bytes=268435456),
            event("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 171, 149.5, correlation=9, bytes=268435456),
        ]
    }
    assert kineto.kernels(trace) == []
    launches, outside = kineto.launch_log(kineto.device_work(trace), build("unet3d"), "torch")
    assert [(k.range, k.role, k.grid, k.time_ms) for k in launches] == [
        ("concat1/fwd", "copy", (0, 0, 0), 0.1505),
        ("concat1/fwd", "copy", (0, 0, 0), 0.1495),
    ]
    assert [k.name for k in outside] == ["Memcpy HtoD (Pageable -> Device)"]
    assert "concat1/fwd" not in kineto.without_kernels(launches, build("unet3d"), "both", 1)
    assert "concat1/bwd_data" in kineto.without_kernels(launches, build("unet3d"), "both", 1)
