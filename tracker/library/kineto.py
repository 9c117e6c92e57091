"""A PyTorch profiler trace read as a launch log (pure Python: no torch needed to read one).

``torch.profiler`` records through CUPTI (Kineto) each kernel a step ran, with its full name
(template arguments kept), grid, block, registers, shared memory and device time, and the host
runtime call that launched it, linked by a ``correlation`` id; each ``record_function`` range
is a ``user_annotation`` span on the host thread that opened it. A kernel belongs to the
innermost annotation, on the thread that launched it, whose span holds its launch call: that is
how a library kernel is told which layer phase it ran for, whatever its name, and how the same
kernel launched by several layers is told apart (by the range, and by invocation order).

The autograd engine also launches kernels between two backward nodes, on its own thread where no
range is open: it sums the gradients a tensor gets from several uses (LRN's backward, where the
input feeds several ops). Such a kernel belongs to the layer phase whose call the engine was
running, the innermost range on any thread that holds its launch (``caller``): the calling
thread holds ``layer/phase`` open around ``autograd.grad``. It is stored with that layer phase,
marked as outside every range (``LoggedLaunch.in_range``), where ncu sees it too (tracker/profilers/join.py).

Which iteration it ran in is its range's *occurrence*. On a GPU every backward node reopens its
layer phase's range on the autograd engine's thread (``torch_net.bracket_nodes``), so one layer
phase's backward leaves many spans of its name; all lie inside the span the calling thread holds
open for the layer phase while the engine runs. So spans of one name are numbered in time across
threads, a span inside another of its name taking that one's number: one per iteration.

Besides kernels, the trace logs the copies and fills a layer phase asks the driver for
(``gpu_memcpy``, ``gpu_memset``: cuBLAS zeroing its workspace; on an H200 the 3-D U-Net's
concatenation forward at batch 1 launched no kernel, its copies into contiguous slices presumably
device-to-device ``cudaMemcpyAsync`` calls). They take device time in their layer phase, so
pass 1 logs them with the kernels (``device_work``), under the names the trace gives them
(``Memcpy DtoD (Device -> Device)``, ``Memset (Device)``) and no grid; no kernel profiler counts
them (``tracker.kernel_names.is_transfer``).

The trace is Chrome's JSON (``prof.export_chrome_trace``), the format Holistic Trace Analysis
reads too; ``tests/data/public/`` holds a real one of AlexNet under PyTorch on an A100.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import zlib
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from tracker.errors import TrackerError
from tracker.phases import PHASES

if TYPE_CHECKING:
    from tracker.gpu.workload import LoggedLaunch
    from tracker.nets import Layer, Network

RUNTIME = ("cuda_runtime", "cuda_driver")  # the host calls that launch kernels, copies and fills
KERNELS, TRANSFERS = ("kernel",), ("gpu_memcpy", "gpu_memset")  # the device's work, by category


class Annotation(NamedTuple):
    name: str
    start_us: float
    end_us: float
    occurrence: int = 0  # which span of its name, in time, not counting those inside another (``_numbered``)


class TraceKernel(NamedTuple):
    """One kernel of the trace, or one copy or fill (no grid, no block: ``(0, 0, 0)``), in launch order."""

    name: str
    annotation: Annotation | None  # the innermost range holding its launch; None outside every range
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers: int | None
    shared_bytes: int
    time_ms: float  # device time
    correlation: int
    caller: Annotation | None = None  # outside every range on its thread: the innermost on any thread holding it
    start_us: float | None = None  # when it began on the device, on the trace's clock


MOST_BYTES = 512 << 20  # the largest trace read (its JSON text, after gunzip): about 3 GB at its peak


def load(path: str | Path) -> dict:
    """A trace file (``.json`` or ``.json.gz``) as its JSON object. A file that is not JSON, is
    cut short, nests past Python's stack, or holds more than ``MOST_BYTES`` of text (a gzip bomb
    included: no more is ever unpacked) is refused in one line."""
    opener = gzip.open if str(path).endswith(".gz") else open
    where = f"cannot read the PyTorch profiler trace {path}"
    try:
        with opener(path, "rb") as f:
            text = f.read(MOST_BYTES + 1)
        if len(text) > MOST_BYTES:
            raise TrackerError(f"{where}: it holds more than {MOST_BYTES / 2**20:g} MiB of JSON; profile fewer steps")
        trace = json.loads(text)
    except RecursionError:
        raise TrackerError(f"{where}: its JSON nests deeper than Python's stack") from None
    except (OSError, EOFError, ValueError, MemoryError, zlib.error) as exc:
        raise TrackerError(f"{where}: {exc}") from None
    if isinstance(trace, list):  # the Trace Event Format's other form: the events alone
        return {"traceEvents": trace}
    if not isinstance(trace, dict):
        raise TrackerError(f"{where}: not a trace (its JSON is a {type(trace).__name__})")
    return trace


def kernels(trace: dict) -> list[TraceKernel]:
    """Every kernel of the trace in launch order, each with the annotation it ran under."""
    return _device_events(trace, KERNELS)


def device_work(trace: dict) -> list[TraceKernel]:
    """Every kernel, copy and fill of the trace in launch order, each with the annotation it ran under."""
    return _device_events(trace, KERNELS + TRANSFERS)


def _device_events(trace: dict, categories: tuple[str, ...]) -> list[TraceKernel]:
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    launches: dict[int, dict] = {}
    spans: defaultdict[tuple, list[Annotation]] = defaultdict(list)
    found = []
    for event in events:
        category, args = event.get("cat"), event.get("args") or {}
        if category in RUNTIME and "correlation" in args:
            launches[args["correlation"]] = event
        elif category == "user_annotation":
            spans[(event.get("pid"), event.get("tid"))].append(
                Annotation(event["name"], float(event["ts"]), float(event["ts"]) + float(event.get("dur", 0)))
            )
        elif category in categories:
            found.append(event)
    numbered = _numbered(spans)
    out = []
    for event in found:
        args = event["args"]
        launch = launches.get(args.get("correlation"))
        at = float(launch["ts"]) if launch else float(event["ts"])
        where = numbered.get((launch.get("pid"), launch.get("tid"))) if launch else None
        annotation = _innermost(where or [], at)
        out.append(
            (
                at,
                args.get("correlation", 0),
                TraceKernel(
                    event["name"],
                    annotation,
                    *geometry(args),
                    args.get("registers per thread"),
                    int(args.get("shared memory") or 0),
                    float(event.get("dur", 0)) / 1e3,
                    args.get("correlation", 0),
                    None if annotation else _caller(numbered, at),
                    float(event["ts"]),
                ),
            )
        )
    return [kernel for _, _, kernel in sorted(out, key=lambda item: item[:2])]


def _numbered(spans: dict[tuple, list[Annotation]]) -> dict[tuple, list[Annotation]]:
    """Each thread's spans in start order, each with its occurrence: the spans of one name, on
    every thread, numbered in start order, where one that starts inside an earlier one of its
    name (a backward node's inside its layer phase's) takes that one's number."""
    by_name: defaultdict[str, list[Annotation]] = defaultdict(list)
    for on_thread in spans.values():
        for annotation in on_thread:
            by_name[annotation.name].append(annotation)
    occurrence: dict[Annotation, int] = {}
    for same in by_name.values():
        count, end = -1, -math.inf
        for annotation in sorted(same, key=lambda a: a.start_us):
            if annotation.start_us > end:  # outside every earlier one: the next occurrence
                count += 1
            end = max(end, annotation.end_us)
            occurrence[annotation] = count
    return {
        where: sorted((a._replace(occurrence=occurrence[a]) for a in on_thread), key=lambda a: a.start_us)
        for where, on_thread in spans.items()
    }


def _innermost(annotations: list[Annotation], at: float) -> Annotation | None:
    """The latest-starting annotation whose span holds ``at``: nested spans start inside their
    parents, so the first one found walking back from ``at`` is the innermost."""
    starts = [a.start_us for a in annotations]
    for annotation in reversed(annotations[: bisect.bisect_right(starts, at)]):
        if annotation.end_us >= at:
            return annotation
    return None


def _caller(numbered: dict[tuple, list[Annotation]], at: float) -> Annotation | None:
    """The innermost annotation on any thread whose span holds ``at`` (the latest-starting)."""
    held = [a for on_thread in numbered.values() if (a := _innermost(on_thread, at)) is not None]
    return max(held, key=lambda a: a.start_us, default=None)


def geometry(args: dict) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """A kernel's grid and block; a copy's or a fill's, which has neither, (0, 0, 0) twice."""
    if "grid" not in args:
        return (0, 0, 0), (0, 0, 0)
    return _dim3(args["grid"]), _dim3(args.get("block"))


def _dim3(value) -> tuple[int, int, int]:
    x, y, z = (list(value or []) + [1, 1, 1])[:3]
    return int(x), int(y), int(z)


def launch_log(traced: list[TraceKernel], net: Network, variant: str) -> tuple[list[LoggedLaunch], list[TraceKernel]]:
    """(the launches of ``net``'s layer phases, in invocation order, tagged with their phase's
    algorithm and their role (``workload.tagged``); the kernels that ran outside every layer
    phase's range and call). A kernel's repeat is its range's occurrence: the measured iteration it
    ran in. One the engine ran between two nodes is its caller's (``in_range`` False). Each keeps
    when it began, in ns after the first of them began."""
    from tracker.gpu.workload import LoggedLaunch, tagged

    layers = {layer.name: layer for layer in net.layers}
    origin = min((k.start_us for k in traced if k.start_us is not None), default=0.0)
    launches: list[LoggedLaunch] = []
    outside = []
    for k in traced:
        annotation = k.annotation or k.caller
        where = _layer_phase(annotation.name, layers) if annotation else None
        if where is None or annotation is None:
            outside.append(k)
            continue
        layer, phase = where
        launches.append(
            LoggedLaunch(
                len(launches),
                layer.id,
                layer.name,
                phase,
                annotation.occurrence,
                k.name,
                variant,
                "ca",
                k.grid,
                k.block,
                k.shared_bytes,
                k.registers,
                k.time_ms,
                in_range=k.annotation is not None,
                start_ns=None if k.start_us is None else nanoseconds(k.start_us, origin),
            )
        )
    return tagged(_from_the_first(launches)), outside


def nanoseconds(at_us: float, origin_us: float) -> int:
    """A trace time in ns after ``origin_us``: the difference taken in µs first, where both are
    exact (a trace's epoch times in µs exceed 2^53 once multiplied to ns, and lose the ns)."""
    return round((at_us - origin_us) * 1e3)


def _from_the_first(launches: list[LoggedLaunch]) -> list[LoggedLaunch]:
    """The launches with their starts counted from the first one's (the trace's clock is its own)."""
    from dataclasses import replace

    starts = [k.start_ns for k in launches if k.start_ns is not None]
    if not starts:
        return launches
    origin = min(starts)
    return [k if k.start_ns is None else replace(k, start_ns=k.start_ns - origin) for k in launches]


def without_kernels(launches: list[LoggedLaunch], net: Network, phases: str, repeat: int) -> list[str]:
    """The layer phases ('layer/phase', in training order) that launched no kernel and no copy in
    some measured iteration: a library can run one as views alone (PyTorch's concatenation backward
    hands out slices of the joined gradient), which then takes no time."""
    ran = {(k.range, k.repeat) for k in launches}
    order = [f"{layer.name}/{phase}" for layer, phase in net.training_order(phases)]
    return [name for name in order if any((name, r) not in ran for r in range(repeat))]


def _layer_phase(name: str, layers: dict[str, Layer]) -> tuple[Layer, str] | None:
    """The layer and phase of a range named 'layer/phase' (ours), or None."""
    layer, _, phase = name.rpartition("/")
    return (layers[layer], phase) if layer in layers and phase in PHASES else None
