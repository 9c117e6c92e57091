"""A public Kineto trace of AlexNet's forward pass under PyTorch on an A100
(tests/data/public/SOURCES.md), and ``rehomed`` to put its kernels under our range names.

Its ranges are the PARAM benchmark's, not ours; where a test needs ours, ``rehomed`` adds
``user_annotation`` spans named as our layer phases around chosen runs of its kernels' launches
(and says so): every kernel event is left as recorded.
"""

from __future__ import annotations

import copy
from pathlib import Path

from tracker.library import kineto

TRACE = Path(__file__).parent / "data" / "public" / "pytorch-alexnet-fwd-a100-kineto.json.gz"

# Kernels of one forward pass (0-38, in launch order) put under our range names by ``rehomed``.
SMALL_NET_RANGES = {
    "conv1/fwd": (0, 1),
    "relu1/fwd": (3, 3),
    "pool1/fwd": (4, 4),
    "conv2/fwd": (5, 8),
    "relu2/fwd": (10, 10),
    "fc3/fwd": (30, 31),
    "relu3/fwd": (32, 32),
    "fc4/fwd": (34, 35),
}
# AlexNet's own layers (its bias adds, average pool and dropouts, which ours has not, left outside)
ALEXNET_RANGES = {
    "conv1/fwd": (0, 1),
    "relu1/fwd": (3, 3),
    "pool1/fwd": (4, 4),
    "conv2/fwd": (5, 8),
    "relu2/fwd": (10, 10),
    "pool2/fwd": (11, 11),
    "conv3/fwd": (12, 14),
    "relu3/fwd": (16, 16),
    "conv4/fwd": (17, 19),
    "relu4/fwd": (21, 21),
    "conv5/fwd": (22, 24),
    "relu5/fwd": (26, 26),
    "pool5/fwd": (27, 27),
    "fc6/fwd": (30, 31),
    "relu6/fwd": (32, 32),
    "fc7/fwd": (34, 35),
    "relu7/fwd": (36, 36),
    "fc8/fwd": (37, 38),
}


def rehomed(trace: dict, ranges: dict[str, tuple[int, int]]) -> dict:
    """The trace with a user_annotation per range and forward pass (warm-up, then measured),
    spanning the launch calls of its kernels (``ranges``: first and last index in one pass)."""
    kernels = kineto.kernels(trace)
    launches = {
        e["args"]["correlation"]: e
        for e in trace["traceEvents"]
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    out = copy.deepcopy(trace)
    for offset in (1, 40):
        for name, (first, last) in ranges.items():
            start, end = (launches[kernels[offset + i].correlation] for i in (first, last))
            out["traceEvents"].append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": name,
                    "pid": start["pid"],
                    "tid": start["tid"],
                    "ts": start["ts"] - 1,
                    "dur": end["ts"] + end["dur"] - start["ts"] + 2,
                }
            )
    return out
