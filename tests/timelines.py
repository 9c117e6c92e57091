"""Reading a timeline back as a reader that is not its writer: Perfetto's own protobuf classes, and
a Trace Event reader written here that nests complete events by time alone; and what the store
says a run's timeline holds, worked out from its rows (test_timeline.py and the importers' tests)."""

from __future__ import annotations

import json
from itertools import groupby
from pathlib import Path

from tracker.cli import cli
from tracker.store import launch_rows, layer_rows, metric_rows

# What a reader finds: per process id, its name, its slice tracks (track name -> (depth, name, start
# ns, duration ns) in begin order) and its counters (name -> [(ns, value)]).
Found = dict[int, dict]


def read_chrome(path: Path) -> Found:
    """Trace Event Format: metadata names processes and threads; complete events on one thread
    nest by time (an event inside the one open before it is its child); counters by name."""
    events = json.loads(path.read_text())["traceEvents"]
    found: Found = {}
    threads = {}
    for e in events:
        process = found.setdefault(e["pid"], {"name": None, "tracks": {}, "counters": {}})
        if e["ph"] == "M" and e["name"] == "process_name":
            process["name"] = e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_name":
            threads[e["pid"], e["tid"]] = e["args"]["name"]
        elif e["ph"] == "C":
            process["counters"].setdefault(e["name"], []).append((round(e["ts"] * 1e3), e["args"][e["name"]]))
    for (pid, tid), track in threads.items():
        complete = sorted(
            (e for e in events if e["ph"] == "X" and (e["pid"], e["tid"]) == (pid, tid)),
            key=lambda e: (e["ts"], -e["dur"]),
        )
        slices, open_ends = [], []
        for e in complete:
            start, end = round(e["ts"] * 1e3), round((e["ts"] + e["dur"]) * 1e3)
            while open_ends and start >= open_ends[-1] and not (start == end == open_ends[-1]):
                open_ends.pop()
            slices.append((len(open_ends), e["name"], start, end - start))
            open_ends.append(end)
        found[pid]["tracks"][track] = slices
    return found


def read_perfetto(path: Path) -> Found:
    """Perfetto's protobuf, through its own classes: track descriptors name processes, their
    tracks and counter tracks; slice begin and end events on a track nest as a stack."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    trace = Trace.FromString(path.read_bytes())
    tracks, found = {}, {}
    for packet in trace.packet:
        if packet.HasField("track_descriptor"):
            d = packet.track_descriptor
            if d.HasField("process"):
                found[d.process.pid] = {"name": d.process.process_name, "tracks": {}, "counters": {}}
                tracks[d.uuid] = (d.process.pid, None, False)
            else:
                tracks[d.uuid] = (tracks[d.parent_uuid][0], d.name, d.HasField("counter"))
    stacks: dict[int, list] = {}
    for packet in trace.packet:
        if not packet.HasField("track_event"):
            continue
        event = packet.track_event
        pid, track, counter = tracks[event.track_uuid]
        if counter:
            assert event.type == TrackEvent.TYPE_COUNTER
            found[pid]["counters"].setdefault(track, []).append((packet.timestamp, event.double_counter_value))
        elif event.type == TrackEvent.TYPE_SLICE_BEGIN:
            stack = stacks.setdefault(event.track_uuid, [])
            slices = found[pid]["tracks"].setdefault(track, [])
            slices.append([len(stack), event.name, packet.timestamp, None])
            stack.append(slices[-1])
        elif event.type == TrackEvent.TYPE_SLICE_END:
            begun = stacks[event.track_uuid].pop()
            begun[3] = packet.timestamp - begun[2]
    for process in found.values():
        process["tracks"] = {name: [tuple(s) for s in slices] for name, slices in process["tracks"].items()}
    return found


READERS = {"perfetto": read_perfetto, "chrome": read_chrome}


def exported(runner, db: str, target: str, fmt: str, tmp_path: Path) -> Found:
    path = tmp_path / f"timeline{'.pftrace' if fmt == 'perfetto' else '.json'}"
    done = runner.invoke(cli, ["export", target, "--format", fmt, "--out", str(path), "--db", db])
    assert done.exit_code == 0, done.output
    return READERS[fmt](path)


def expected(store, run_id: int) -> tuple[dict[str, list[tuple]], dict]:
    """What the store says the run's process holds, worked out here from its rows: its slice
    tracks and counters. Launches start where stored (from the first at 0), else end to end; one
    that starts before the GPU track's last launch ended goes to the first lane beside it free then."""
    launches = launch_rows(store, run_id)
    names = {r["layer_id"]: r["layer"] for r in layer_rows(store, run_id)}
    durations = [round((k["time_ms"] or 0) * 1e6) for k in launches]
    if all(k["start_ns"] is not None for k in launches):
        origin = min(k["start_ns"] for k in launches)
        starts = [k["start_ns"] - origin for k in launches]
    else:
        starts = [sum(durations[:i]) for i in range(len(launches))]
    at = {k["invocation"]: (s, d) for k, s, d in zip(launches, starts, durations)}
    serial, lanes = [], []
    for k in launches:
        start, dur = at[k["invocation"]]
        if not serial or start >= sum(at[serial[-1]["invocation"]]):
            serial.append(k)
            continue
        lane = next((lane for lane in lanes if lane[-1][2] + lane[-1][3] <= start), None)
        if lane is None:
            lanes.append(lane := [])
        lane.append((0, k["kernel_name"], start, dur))
    slices = []

    def span(depth: int, name: str, group: list[dict]) -> None:
        first = min(at[k["invocation"]][0] for k in group)
        slices.append((depth, name, first, max(sum(at[k["invocation"]]) for k in group) - first))

    for _, iteration in groupby(serial, key=lambda k: k["repeat"]):
        iteration = list(iteration)
        span(0, f"iteration {iteration[0]['repeat'] + 1}", iteration)
        for layer_id, layer in groupby(iteration, key=lambda k: k["layer_id"]):
            layer = list(layer)
            span(1, names[layer_id], layer)
            for phase_name, phase in groupby(layer, key=lambda k: k["phase"]):
                phase = list(phase)
                span(2, phase_name, phase)
                slices += [(3, k["kernel_name"], *at[k["invocation"]]) for k in phase]
    tracks = {"GPU": slices, **{f"GPU, beside it {n}": lane for n, lane in enumerate(lanes, 1)}}
    counters: dict[str, list] = {}
    for m in metric_rows(store, run_id):
        counters.setdefault(m["name"], []).append((at[m["invocation"]][0], m["value"]))
    return tracks, counters


def check(found: dict, store, run_id: int) -> None:
    tracks, counters = expected(store, run_id)
    assert found["tracks"] == tracks
    for name, values in counters.items():
        steps = dict(found["counters"][name])  # where a launch starts as the one before ends, its value wins
        assert [(t, steps[t]) for t, _ in values] == values, name
    assert set(found["counters"]) == set(counters)
