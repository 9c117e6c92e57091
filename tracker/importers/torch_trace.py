"""A PyTorch profiler trace (Kineto's Chrome JSON, as ``torch.profiler`` exports it, plain or gzipped).

Each kernel, copy and fill the GPU ran is a launch, in the order the host launched it, with the
device's own start time, duration, grid, block, registers and shared memory. Where it ran is read
from the host spans open around the runtime call that launched it (linked by ``correlation``), on
the launching thread:

- the ``record_function`` ranges (``user_annotation``) and ``nn.Module`` ranges (``python_function``,
  with ``with_stack``) open around it, outermost first, are its ranges;
- where the innermost of them is a module, or a range named as tracker names its own
  (``conv1/fwd``), that range is the layer;
- otherwise the operator the program called inside it (the outermost ``cpu_op`` there:
  ``aten::conv2d`` rather than the ``aten::cudnn_convolution`` beneath) is, numbered among the
  calls of its kind inside the same range (``OPERATOR_KINDS``: ``aten::relu`` and ``aten::relu_``
  are one kind): ``aten::conv2d#3`` is the fourth convolution of a forward. Each step's calls are
  numbered afresh, so a layer is met once a step.

The autograd engine runs the backward on its own thread, one node at a time
(``autograd::engine::evaluate_function: ConvolutionBackward0``); a node carries the sequence number
of the forward operator that made it, so its kernels belong to that operator's layer, in the
backward. A node computes its input's and its weights' gradients together, and the trace cannot
tell them apart: an imported backward is stored whole as ``bwd_data`` (the run says so).

Where the profiler's schedule marked its steps (``ProfilerStep#N``), a launch's iteration is the
step it was launched in; otherwise each new instance of its layer's range is one (``importers/run.py``).
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracker.errors import TrackerError
from tracker.importers.base import OPERATOR_KINDS, WHOLE_PHASE, Imported, ImportedLaunch, call_label
from tracker.phases import PHASES

LAUNCHES = {"cuda_runtime", "cuda_driver", "runtime"}  # host calls that launch device work (older traces: Runtime)
OPERATORS = {"cpu_op", "operator"}
DEVICE = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
STEP = re.compile(r"ProfilerStep#\d+")  # the range the profiler's schedule opens around each step
MODULE = "nn.Module: "  # a python_function span of a module's forward
NODE = "autograd::engine::evaluate_function: "  # a backward node's span on the engine's thread
BACKWARD = WHOLE_PHASE  # where a node's kernels go: the layer's whole backward (the module's docstring)
EPS_US = 5e-4  # a child span may end past its parent by float rounding of ts + dur
ORDER = {"range": 0, "op": 1, "launch": 2}  # a range opened at the same instant as an op holds it


@dataclass(eq=False)
class Span:
    """A host span: a range (record_function or module), an operator, or a launching runtime call."""

    kind: str
    name: str
    start: float
    end: float
    args: dict
    module: bool = False
    parent: Span | None = None
    label: str = ""  # an operator called directly in a range: its name and number there
    engine: bool = False  # on a thread that runs backward nodes: the autograd engine's


@dataclass
class Trace:
    spans: dict[tuple, list[Span]] = field(default_factory=lambda: defaultdict(list))
    launches: dict[Any, Span] = field(default_factory=dict)  # correlation -> its runtime call
    device: list[dict] = field(default_factory=list)


def read(path: Path) -> Imported:
    from tracker.library.kineto import load

    raw = load(path)
    try:
        trace = _collect(raw)
        for spans in trace.spans.values():
            _nest(spans)
        _label(trace)
        forward = _forward_ops(trace)
        origin = min((float(event["ts"]) for event in trace.device), default=0.0)
        steps = _steps(trace)
        launches = [_launch(event, trace, forward, origin, steps) for event in _in_launch_order(trace)]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TrackerError(f"cannot read {path} as a PyTorch profiler trace: a malformed event ({exc!r})") from None
    if not launches:
        raise TrackerError(f"{path} holds no GPU kernel: a PyTorch profiler trace of CPU work, or not one at all")
    device = _device(raw, trace.device[0])
    major, minor, sms = (_whole(device.get(key)) for key in ("computeMajor", "computeMinor", "numSms"))
    return Imported(
        str(path),
        "pytorch-trace",
        "events",
        f"PyTorch profiler (Kineto trace schema {str(raw.get('schemaVersion', '?'))[:20]})",
        None if device.get("name") is None else str(device["name"])[:200],
        None if major is None else f"{major}.{minor or 0}",
        sms,
        {},
        launches,
        backward_whole=any(launch.phase == BACKWARD for launch in launches),
    )


def _collect(raw: dict) -> Trace:
    events = raw.get("traceEvents", [])
    if not isinstance(events, list):
        raise ValueError("traceEvents is not a list")
    trace = Trace()
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        category, name = str(event.get("cat", "")).lower(), str(event.get("name", ""))
        if category in DEVICE:
            trace.device.append(event)
            continue
        args = event.get("args") or {}
        if category in LAUNCHES:
            if "correlation" not in args:
                continue
            kind = "launch"
        elif category in OPERATORS:
            kind = "op"
        elif category == "user_annotation" or (category == "python_function" and name.startswith(MODULE)):
            kind = "range"
        else:
            continue
        start = float(event["ts"])
        span = Span(kind, name, start, start + float(event.get("dur", 0)), args, name.startswith(MODULE))
        trace.spans[event.get("pid"), event.get("tid")].append(span)
        if kind == "launch":
            trace.launches[args["correlation"]] = span
    return trace


def _nest(spans: list[Span]) -> None:
    """Each span's parent: the innermost span holding it on its thread."""
    spans.sort(key=lambda s: (s.start, -s.end, ORDER[s.kind]))
    stack: list[Span] = []
    engine = any(span.name.startswith(NODE) for span in spans)
    for span in spans:
        while stack and not (stack[-1].start <= span.start and span.end <= stack[-1].end + EPS_US):
            stack.pop()
        span.parent, span.engine = (stack[-1] if stack else None), engine
        stack.append(span)


def _label(trace: Trace) -> None:
    """Each operator called directly in a range, or outside all, its label: its name, numbered
    among the calls of that name in the same range. Outside all ranges on its thread, the range is
    the innermost one holding it on any thread (the step the engine's thread works for)."""
    ranges = sorted((s for spans in trace.spans.values() for s in spans if s.kind == "range"), key=lambda s: s.start)
    starts = [r.start for r in ranges]
    calls: defaultdict[tuple, int] = defaultdict(int)
    for spans in trace.spans.values():
        for span in spans:
            if span.kind != "op" or (span.parent is not None and span.parent.kind != "range"):
                continue
            scope = span.parent or _holding(ranges, starts, span.start)
            called = span.name.removeprefix(NODE)
            kind = OPERATOR_KINDS.get(called, called)
            span.label = call_label(called, calls[id(scope), kind])
            calls[id(scope), kind] += 1


def _holding(ranges: list[Span], starts: list[float], at: float) -> Span | None:
    """The latest-starting range, on any thread, that holds ``at``."""
    for span in reversed(ranges[: bisect.bisect_right(starts, at)]):
        if span.end >= at:
            return span
    return None


def _context(span: Span) -> tuple[list[Span], Span | None]:
    """The ranges holding ``span``, outermost first, and the operator called directly in the
    innermost of them that holds it (``span`` itself, where it is one)."""
    ranges: list[Span] = []
    top = None
    node: Span | None = span
    while node is not None:
        if node.kind == "range":
            ranges.append(node)
        elif node.kind == "op" and not ranges:
            top = node
        node = node.parent
    return ranges[::-1], top


def _forward_ops(trace: Trace) -> dict[Any, list[Span]]:
    """The forward operators that made backward nodes, by sequence number, in start order."""
    found: defaultdict[Any, list[Span]] = defaultdict(list)
    for spans in trace.spans.values():
        for span in spans:
            number = span.args.get("Sequence number") if span.kind == "op" else None
            if number is None:
                continue
            _, top = _context(span)
            if top is not None and not top.name.startswith(NODE):
                found[number].append(span)
    return found


def _where(span: Span, forward: dict[Any, list[Span]]) -> tuple[tuple[str, ...], str | None]:
    """The ranges ``span`` ran in (the layer's the innermost) and its phase, where the trace says one."""
    ranges, top = _context(span)
    names = [r.name for r in ranges]
    if ranges and (ranges[-1].module or _tracker_named(ranges[-1].name)) or top is None:
        return tuple(names), None
    if top.name.startswith(NODE):
        made = _made_by(top, forward)
        if made is not None:
            return _where(made, forward)[0], BACKWARD
        return (*names, top.label), BACKWARD
    return (*names, top.label), BACKWARD if top.engine else None


def _made_by(node: Span, forward: dict[Any, list[Span]]) -> Span | None:
    """The forward operator that made a backward node: the latest of its sequence number before it."""
    ops = forward.get(node.args.get("Sequence number", -1), [])
    before = bisect.bisect_right([op.start for op in ops], node.start)
    return ops[before - 1] if before else None


def _tracker_named(name: str) -> bool:
    layer, _, phase = name.rpartition("/")
    return bool(layer) and phase in PHASES


def _in_launch_order(trace: Trace) -> list[dict]:
    """The device's events in the order the host launched them (by the runtime call, then correlation)."""

    def launched(event: dict) -> tuple[float, int]:
        correlation = (event.get("args") or {}).get("correlation", 0)
        call = trace.launches.get(correlation)
        return (call.start if call else float(event["ts"]), correlation)

    return sorted(trace.device, key=launched)


def _launch(
    event: dict, trace: Trace, forward: dict[Any, list[Span]], origin_us: float, steps: list[float]
) -> ImportedLaunch:
    """One device event as a launch; its iteration the step that was running when it was launched
    (the latest to start at or before its call), where the trace marks steps."""
    from tracker.library.kineto import geometry, nanoseconds

    args = event.get("args") or {}
    call = trace.launches.get(args.get("correlation", -1))
    ranges, phase = _where(call, forward) if call else ((), None)
    called = call.start if call else float(event["ts"])
    grid, block = geometry(args)
    registers = args.get("registers per thread")
    return ImportedLaunch(
        str(event["name"]),
        ranges,
        grid,
        block,
        None if registers is None else int(registers),
        int(args.get("shared memory") or 0),
        float(event.get("dur", 0)) / 1e3,
        start_ns=nanoseconds(float(event["ts"]), origin_us),
        phase=phase,
        iteration=max(0, bisect.bisect_right(steps, called) - 1) if steps else None,
    )


def _steps(trace: Trace) -> list[float]:
    """When each iteration the profiler's schedule marked began (``ProfilerStep#N``), in order."""
    return sorted(s.start for spans in trace.spans.values() for s in spans if s.kind == "range" and STEP.match(s.name))


def _whole(value: Any) -> int | None:
    """A device property that should be a small whole number, or None where it is not one."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 20 else None


def _device(raw: dict, first: dict) -> dict:
    """The properties of the GPU the first kernel ran on, where the trace lists them."""
    listed = raw.get("deviceProperties", [])
    listed = listed if isinstance(listed, list) else []
    wanted = (first.get("args") or {}).get("device", 0)
    found = [d for d in listed if isinstance(d, dict) and d.get("id") == wanted]
    return found[0] if found else {}
