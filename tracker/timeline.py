"""A run, or an experiment's arms, as a timeline: Perfetto's protobuf trace (``perfetto``) or the
Trace Event Format JSON that chrome://tracing and Perfetto's UI both open (``chrome``).

One process per run, named by network, batch, implementation and GPU, with one GPU track of nested
slices: iteration, layer, layer phase, kernel launch. A launch that ran beside the one before it (a
library's kernels on two streams at once) goes to a lane of its own beside the GPU track. A
launch's slice carries its kernel, grid, block, registers, algorithm and role, its measured time
and its layer phase's predicted time and bound; each counter the run stored is a counter track of
the process, holding each profiled launch's value while it runs. An experiment's arms are
processes of one trace, each starting at 0.

A launch starts where the run stored when it began (``launch.start_ns``: the library arm, imported
runs); a run that stored durations only (our kernels on CUDA events) has its launches laid end to
end in invocation order, and its process says so. Times are whole nanoseconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracker.errors import TrackerError, unknown
from tracker.extras import install

if TYPE_CHECKING:
    from tracker.store import Store

FORMATS = {"perfetto": ".pftrace", "chrome": ".json"}  # --format -> the file's suffix
END_TO_END = "laid end to end in invocation order: this run stored each launch's duration, not its start"


@dataclass
class Slice:
    name: str
    start_ns: int
    dur_ns: int
    args: dict[str, Any] = field(default_factory=dict)
    children: list[Slice] = field(default_factory=list)

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


@dataclass
class Process:
    """One run on the timeline."""

    pid: int
    name: str
    slices: list[Slice]  # the GPU track: the iterations, each holding its layers, phases and launches
    counters: dict[str, list[tuple[int, float]]]  # metric -> (time, value) steps, in time order
    note: str = ""  # how its times were laid out, where they are not the run's own
    lanes: list[list[Slice]] = field(default_factory=list)  # launches that ran beside the GPU track's


def run_process(store: Store, run_id: int, pid: int = 1, label: str = "") -> Process:
    """Run ``run_id`` as a process of the timeline (``label``: an experiment arm's name, first)."""
    from tracker.store import find_run, launch_rows, layer_rows, metric_rows, run_dict

    run = run_dict(find_run(store, run_id))
    launches = launch_rows(store, run_id)
    phases = {(r["layer_id"], r["phase"]): r for r in layer_rows(store, run_id)}
    timed = bool(launches) and all(k["start_ns"] is not None for k in launches)
    for k, start in zip(launches, _starts(launches, timed)):
        k["start"] = start
    serial, lanes = _lanes(launches, phases)
    iterations = [
        _span(f"iteration {repeat + 1}", _layers(list(group), phases))
        for repeat, group in groupby(serial, key=lambda k: k["repeat"])
    ]
    return Process(
        pid,
        (f"{label}: " if label else "") + _describe(run),
        iterations,
        _counters(metric_rows(store, run_id), launches),
        "" if timed or not launches else END_TO_END,
        lanes,
    )


def _lanes(launches: list[dict], phases: dict) -> tuple[list[dict], list[list[Slice]]]:
    """(the launches of the GPU track, one after another; the rest as lanes beside it). A launch
    that starts before the one before it on the GPU track ended (a library's kernels on two
    streams at once) goes to the first lane where it overlaps nothing, so every track nests."""
    serial: list[dict] = []
    lanes: list[list[Slice]] = []
    for k in launches:
        if not serial or k["start"] >= serial[-1]["start"] + _dur(serial[-1]):
            serial.append(k)
            continue
        launch = _launch(k, phases)
        lane = next((lane for lane in lanes if lane[-1].end_ns <= launch.start_ns), None)
        if lane is None:
            lanes.append(lane := [])
        lane.append(launch)
    return serial, lanes


def experiment_processes(store: Store, experiment_id: int) -> list[Process]:
    """Each arm's run as a process, in the experiment's arm order, each starting at 0."""
    from tracker.store.queries import experiment_arm_runs

    arms = experiment_arm_runs(store, experiment_id)
    if not arms:
        raise TrackerError(f"experiment e{experiment_id} has no run yet: nothing to put on a timeline")
    return [run_process(store, run_id, pid, arm) for pid, (arm, run_id) in enumerate(arms, 1)]


def _describe(run: dict) -> str:
    gpu = run.get("device_name") or "no GPU: the model's predictions"
    return f"run {run['id']}: {run['network']} batch {run['batch']}, {run['implementation']}, {gpu}"


def _starts(launches: list[dict], timed: bool) -> list[int]:
    """Each launch's start: the stored one, from the first at 0, or end to end in invocation order."""
    if timed:
        origin = min(k["start_ns"] for k in launches)
        return [k["start_ns"] - origin for k in launches]
    starts, at = [], 0
    for k in launches:
        starts.append(at)
        at += _dur(k)
    return starts


def _dur(k: dict) -> int:
    return round((k["time_ms"] or 0.0) * 1e6)


def _layers(launches: list[dict], phases: dict) -> list[Slice]:
    """An iteration's layers, each a run of consecutive launches of one layer (its forward, and
    later its backward), holding its phases."""
    return [
        _span(_layer(group[0], phases), [_phase(list(p), phases) for _, p in groupby(group, key=lambda k: k["phase"])])
        for group in (list(g) for _, g in groupby(launches, key=lambda k: k["layer_id"]))
    ]


def _layer(launch: dict, phases: dict) -> str:
    row = phases.get((launch["layer_id"], launch["phase"]))
    return row["layer"] if row else f"layer {launch['layer_id']}"


def _phase(launches: list[dict], phases: dict) -> Slice:
    """A layer phase's slice over its launches, with the model's prediction beside its measured time."""
    phase = _span(launches[0]["phase"], [_launch(k, phases) for k in launches])
    phase.args = {"measured_ms": sum(k["time_ms"] or 0.0 for k in launches), **_predicted(launches[0], phases)}
    return phase


def _predicted(k: dict, phases: dict) -> dict:
    """The model's prediction for a launch's layer phase."""
    row = phases.get((k["layer_id"], k["phase"]), {})
    return {"predicted_ms": row.get("predicted_ms"), "bound": row.get("bound")}


def _launch(k: dict, phases: dict) -> Slice:
    args = {
        "invocation": k["invocation"],
        "layer": _layer(k, phases),
        "phase": k["phase"],
        "grid": [k["grid_x"], k["grid_y"], k["grid_z"]],
        "block": [k["block_x"], k["block_y"], k["block_z"]],
        "registers": k["registers"],
        "shared_bytes": k["shared_bytes"],
        "variant": k["variant"],
        "algorithm": k["algorithm"],
        "role": k["role"],
        "measured_ms": k["time_ms"],
        **_predicted(k, phases),
    }
    return Slice(k["kernel_name"], k["start"], _dur(k), args)


def _span(name: str, children: list[Slice]) -> Slice:
    """A slice over its children, from the first's start to the last end."""
    start = min(c.start_ns for c in children)
    return Slice(name, start, max(c.end_ns for c in children) - start, children=children)


def _counters(metrics: list[dict], launches: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """Each metric's steps: its value at each profiled launch's start, back to 0 at its end unless
    the next profiled launch starts there."""
    where = {k["invocation"]: (k["start"], k["start"] + _dur(k)) for k in launches}
    tracks: dict[str, list[tuple[int, float]]] = {}
    for name, rows in groupby(sorted(metrics, key=lambda m: (m["name"], m["invocation"])), key=lambda m: m["name"]):
        steps: list[tuple[int, float]] = []
        ended = None  # when the last 0 step was put down: the end of the launch before
        for m in rows:
            if m["value"] is None or m["invocation"] not in where:
                continue
            start, end = where[m["invocation"]]
            if ended == start:
                steps.pop()  # the launch before ended as this one starts: no 0 between them
            steps.append((start, float(m["value"])))
            ended = end if end > start else None  # a launch of no width leaves its value to the next
            if ended is not None:
                steps.append((end, 0.0))
        tracks[name] = steps
    return tracks


def write(
    store: Store, target: str, out: str | Path | None, fmt: str, force: bool = False
) -> tuple[Path, list[Process]]:
    """``target`` (a run, or an experiment: 'e2') as a timeline file of ``fmt`` at ``out`` (default:
    'run-3.pftrace', 'e2.json', ... in the current directory): (the path, what it holds). A file
    that exists is overwritten only with ``force``."""
    from tracker.paths import check_file
    from tracker.store import find_experiment, find_run
    from tracker.store.queries import is_experiment_ref

    if fmt not in FORMATS:
        raise unknown("timeline format", fmt, list(FORMATS))
    if fmt == "perfetto":
        _trace_classes()  # a missing extra is said before any work
    if is_experiment_ref(target):
        experiment = find_experiment(store, target).id
        stem, laid_out = f"e{experiment}", lambda: experiment_processes(store, experiment)
    else:
        run = find_run(store, target).id
        stem, laid_out = f"run-{run}", lambda: [run_process(store, run)]
    path = check_file(out if out is not None else stem + FORMATS[fmt], (FORMATS[fmt],))  # before the work
    if path.exists() and not force:
        raise TrackerError(f"{path} exists: --force overwrites it")
    processes = laid_out()
    data = perfetto(processes) if fmt == "perfetto" else json.dumps(chrome(processes)).encode()
    path.write_bytes(data)
    return path, processes


def walk(slices: list[Slice]) -> Iterator[Slice]:
    """Every slice, each before its children (the order a nesting reader expects)."""
    for s in slices:
        yield s
        yield from walk(s.children)


GPU_TRACK = 1  # the thread id of a process's GPU track


def chrome(processes: list[Process]) -> dict:
    """The Trace Event Format: complete events ('X') nested by time on one track a process,
    counters ('C'), times in microseconds to the nanosecond."""
    events: list[dict] = []
    for p in processes:
        events.append({"ph": "M", "name": "process_name", "pid": p.pid, "tid": 0, "args": {"name": p.name}})
        for tid, (track, slices) in enumerate(_tracks(p), GPU_TRACK):
            events.append({"ph": "M", "name": "thread_name", "pid": p.pid, "tid": tid, "args": {"name": track}})
            events += [
                {
                    "ph": "X",
                    "name": s.name,
                    "pid": p.pid,
                    "tid": tid,
                    "ts": s.start_ns / 1e3,
                    "dur": s.dur_ns / 1e3,
                    "args": {k: v for k, v in s.args.items() if v is not None},
                }
                for s in walk(slices)
            ]
        events += [
            {"ph": "C", "name": name, "pid": p.pid, "ts": t / 1e3, "args": {name: value}}
            for name, steps in p.counters.items()
            for t, value in steps
        ]
    notes = {p.name: p.note for p in processes if p.note}
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": {"source": "tracker", **notes}}


def perfetto(processes: list[Process]) -> bytes:
    """Perfetto's own protobuf trace: a process track, its GPU track of slices (begin and end
    events) and a counter track per metric; a process's note is its track's description."""
    Trace, TrackEvent = _trace_classes()
    trace = Trace()

    def packet(timestamp: int | None = None):
        added = trace.packet.add()
        added.trusted_packet_sequence_id = 1
        if timestamp is not None:
            added.timestamp = timestamp
        return added

    for p in processes:
        process, gpu = p.pid << 20, (p.pid << 20) + 1  # track uuids: the process's, then its tracks'
        described = packet().track_descriptor
        described.uuid, described.process.pid, described.process.process_name = process, p.pid, p.name
        if p.note:
            described.description = p.note
        tracks = _tracks(p)
        for n, (track, slices) in enumerate(tracks):
            described = packet().track_descriptor
            described.uuid, described.parent_uuid, described.name = gpu + n, process, track
            for event_type, s, at in _begins_and_ends(slices):
                event = packet(at).track_event
                event.type, event.track_uuid = event_type, gpu + n
                if event_type == TrackEvent.TYPE_SLICE_BEGIN:
                    event.name = s.name
                    _annotate(event, s.args)
        for n, (name, steps) in enumerate(p.counters.items(), len(tracks)):
            described = packet().track_descriptor
            described.uuid, described.parent_uuid, described.name = gpu + n, process, name
            described.counter.SetInParent()
            for t, value in steps:
                event = packet(t).track_event
                event.type, event.track_uuid, event.double_counter_value = TrackEvent.TYPE_COUNTER, gpu + n, value
    return trace.SerializeToString()


def _trace_classes() -> tuple[Any, Any]:
    """Perfetto's Trace and TrackEvent protobuf classes; a one-line error without the extra."""
    try:
        from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent
    except ImportError:
        raise TrackerError(
            f"--format perfetto needs the perfetto package: {install('perfetto')} (or --format chrome)"
        ) from None
    return Trace, TrackEvent


def _tracks(p: Process) -> list[tuple[str, list[Slice]]]:
    """A process's slice tracks: the GPU's, then each lane of launches that ran beside it."""
    return [("GPU", p.slices)] + [(f"GPU, beside it {n}", lane) for n, lane in enumerate(p.lanes, 1)]


def _begins_and_ends(slices: list[Slice]) -> Iterator[tuple[int, Slice, int]]:
    """(TYPE_SLICE_BEGIN or TYPE_SLICE_END, the slice, when), in time order: each slice's begin,
    its children's, then its end."""
    begin, end = 1, 2  # TrackEvent.Type's values
    for s in slices:
        yield begin, s, s.start_ns
        yield from _begins_and_ends(s.children)
        yield end, s, s.end_ns


def _annotate(event: Any, args: dict[str, Any]) -> None:
    for name, value in args.items():
        if value is None:
            continue
        note = event.debug_annotations.add()
        note.name = name
        if isinstance(value, bool):
            note.bool_value = value
        elif isinstance(value, int):
            note.int_value = value
        elif isinstance(value, float):
            note.double_value = value
        else:
            note.string_value = "x".join(map(str, value)) if isinstance(value, list) else str(value)
