"""What a reader makes of another tool's profile, whatever the file."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# PyTorch's operators, by the tracker layer kind each computes. A reader that names a layer after
# the operator called (``aten::relu_#5``) numbers it among its kind's calls, so that the k-th call
# of a kind is the k-th layer of that kind of a tracker network (``importers/run.py``).
OPERATOR_KINDS = {
    **dict.fromkeys(("aten::conv2d", "aten::conv3d", "aten::convolution"), "conv"),
    **dict.fromkeys(("aten::conv_transpose2d", "aten::conv_transpose3d"), "convtranspose"),
    **dict.fromkeys(("aten::relu", "aten::relu_"), "relu"),
    **dict.fromkeys(("aten::max_pool2d", "aten::max_pool3d"), "maxpool"),
    **dict.fromkeys(("aten::linear", "aten::addmm"), "linear"),
    **dict.fromkeys(("aten::softmax", "aten::_softmax", "aten::log_softmax"), "softmax"),
    **dict.fromkeys(("aten::batch_norm",), "batchnorm"),
    **dict.fromkeys(("aten::sigmoid", "aten::sigmoid_"), "sigmoid"),
    **dict.fromkeys(("aten::cat",), "concat"),
    **dict.fromkeys(
        ("aten::upsample_nearest2d", "aten::upsample_bilinear2d", "aten::upsample_trilinear3d"), "upsample"
    ),
}
WHOLE_PHASE = "bwd_data"  # where a profile that cannot split a layer's backward in two stores it whole
CALL = re.compile(r"^(?P<operator>.+)#(?P<number>\d+)$")  # a layer named after an operator call


def call_label(operator: str, number: int) -> str:
    return f"{operator}#{number}"


@dataclass(frozen=True)
class ImportedLaunch:
    """One kernel launch of the profile, in the order it ran."""

    kernel_name: str
    ranges: tuple[str, ...]  # the NVTX (or record_function) ranges open around it, outermost first
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers: int | None
    shared_bytes: int
    time_ms: float | None  # its duration, where the profile measured one
    start_ns: int | None = None  # when it began, on the profile's clock, where the profile says
    phase: str | None = None  # its layer's phase, where the profile says it otherwise than by a range's name
    iteration: int | None = None  # which iteration it ran in, where the profile marks them (PyTorch's steps)
    metrics: dict[str, float] = field(default_factory=dict)  # catalog name -> value, in the catalog's unit


@dataclass(frozen=True)
class Imported:
    """A profile read from a file: who made it, on which GPU, how, and its launches."""

    path: str
    format: str  # ncu-rep, ...: the FORMATS name
    collector: str  # the backend it stands for: ncu (counters), events (times only)
    tool: str  # the tool and version that wrote it: 'ncu 2020.1.0'
    device_name: str | None
    compute_capability: str | None
    sm_count: int | None
    settings: dict  # how it profiled (clock and cache control, replay), as the file says
    launches: list[ImportedLaunch]
    sources: dict[str, str] = field(default_factory=dict)  # catalog name -> the tool's own name
    backward_whole: bool = False  # its backward is stored whole as bwd_data (it cannot split a layer's two gradients)
