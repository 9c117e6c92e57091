"""Small networks and sample stores that several test modules build on.

The sample stores: no trace of our own kernels had been recorded (no GPU then), so they are
built from public profiler output (tests/data/ncu). ``sample_store`` assigns the 12 launches of
the public Tesla K20c nvprof sample (4 kernels x 3 iterations, durations from the GPU trace,
counters from the metrics run), for the tests only, to AlexNet's first four layers, forward;
``v100_sample_store`` holds the one kernel of the public V100 excerpt (stalls, hit rates, FP
counts) as conv2 forward.
"""

from __future__ import annotations

from pathlib import Path

from tracker.model import lookup, predict
from tracker.nets import build
from tracker.nets.layers import LRN, Linear, Network, ReLU, Softmax, conv, maxpool
from tracker.profilers import nvprof
from tracker.store import open_store, recording


def small_net() -> Network:
    """A small AlexNet-like network: a whole training step runs on the CPU emulation."""
    net = Network("small", (3, 19, 19), options={})
    net.add("conv1", conv(8, 3, stride=2))
    net.add("relu1", ReLU())
    net.add("lrn1", LRN(alpha=0.1))
    net.add("pool1", maxpool(3, 2))
    net.add("conv2", conv(12, 3, pad=1))
    net.add("relu2", ReLU())
    net.add("fc3", Linear(16))
    net.add("relu3", ReLU())
    net.add("fc4", Linear(10))
    net.add("softmax", Softmax())
    return net


def tiny_net() -> Network:
    """Every op the experiments vary, small enough for the CPU emulation (10 runs in seconds)."""
    net = Network("tiny", (3, 8, 8), options={})
    net.add("conv1", conv(4, 3))
    net.add("relu1", ReLU())
    net.add("lrn1", LRN(alpha=0.1))
    net.add("pool1", maxpool(2, 2))
    net.add("conv2", conv(4, 3, pad=1))
    net.add("relu2", ReLU())
    net.add("fc3", Linear(8))
    net.add("relu3", ReLU())
    net.add("fc4", Linear(5))
    net.add("softmax", Softmax())
    return net


NCU = Path(__file__).parent / "data" / "ncu"
LAYERS = ("conv1", "relu1", "lrn1", "pool1")  # layer IDs 1-4
LABEL = (
    "test store: nvprof counters of a public Tesla K20c sample (tests/data/ncu), assigned to AlexNet "
    "layers to exercise the views; not a measurement of AlexNet"
)


def sample_store(db: str) -> int:
    trace = nvprof.parse_trace((NCU / "nvprof-gputrace-csv-k20c.csv").read_text())
    kernels = nvprof.parse_metrics((NCU / "nvprof-metrics-csv-k20c-stalls.csv").read_text())
    net = build("alexnet")
    names = sorted(kernels)  # __kernel___forma_kernel__0__ ... 3__
    launches, metrics = [], []
    for i, launch in enumerate(trace):
        layer = net.layer(LAYERS[names.index(launch.kernel)])
        launches.append(_launch(i, layer.id, i // 4, launch.kernel, launch.metrics["duration_ns"] / 1e6))
        values = {**kernels[launch.kernel]["values"], "duration_ns": launch.metrics["duration_ns"]}
        metrics += [dict(invocation=i, name=n, value=v) for n, v in values.items()]
    return _store(db, net, launches, metrics, LABEL, "Tesla K20c", repeat=3)


V100_LABEL = (
    "test store: nvprof counters of one kernel of a public Tesla V100 sample (tests/data/ncu, plain-text "
    "excerpt, no duration), assigned to AlexNet's conv2 forward to exercise the views; not a measurement "
    "of AlexNet"
)


def v100_sample_store(db: str) -> int:
    """The V100 excerpt: the full Volta stall set, L1/L2 hit rates and FP32 instruction counts."""
    ((kernel, entry),) = nvprof.parse_metrics_text(
        (NCU / "nvprof-metrics-text-v100-kernel-excerpt.txt").read_text()
    ).items()
    net = build("alexnet")
    metrics = [dict(invocation=0, name=n, value=v) for n, v in entry["values"].items()]
    return _store(
        db,
        net,
        [_launch(0, net.layer("conv2").id, 0, kernel, None)],
        metrics,
        V100_LABEL,
        "Tesla V100-SXM2-16GB",
        repeat=1,
    )


def _launch(invocation: int, layer_id: int, repeat: int, kernel: str, time_ms: float | None) -> dict:
    return dict(
        invocation=invocation,
        layer_id=layer_id,
        phase="fwd",
        repeat=repeat,
        kernel_name=kernel,
        variant="sample",
        l1_policy="ca",
        grid_x=257,
        grid_y=257,
        grid_z=1,
        block_x=32,
        block_y=32,
        block_z=1,
        shared_bytes=0,
        registers=16,
        time_ms=time_ms,
    )


def _store(db: str, net, launches: list[dict], metrics: list[dict], label: str, device: str, repeat: int) -> int:
    """As ``tracker profile`` records a run: the predictions are for the catalog's entry of the device."""
    store = open_store(db, write=True)
    with recording(
        store,
        network="alexnet",
        network_options={},
        batch=1,
        phases="fwd",
        dtype_bits=32,
        variants={},
        l1_bypass=False,
        backend="nvprof",
        backend_reason=label,
        repeat=repeat,
        device_name=device,
    ) as run:
        run.add_layers(net, predict(net, 1, lookup(device), phases="fwd"))
        run.add_launches(launches, metrics)
    store.dispose()
    return run.run_id


def profiled(workload):
    """What pass 2 profiles of ``workload``, as its implementation runs it (a collector's target)."""
    from tracker.implementations import implementation
    from tracker.implementations.child import ProfiledWorkload

    return ProfiledWorkload(workload, implementation(workload.implementation))
