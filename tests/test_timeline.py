"""`tracker export --format perfetto|chrome`: each file is read back by a reader that is not the
writer (Perfetto's own protobuf classes, and a Trace Event reader written here that nests complete
events by time alone), and what it holds is the store's, to the nanosecond: one slice per
iteration, layer, layer phase and launch, each launch's duration and (where the run stored it) its
start, and each stored counter's value on its launch, for one of our runs with counters, a
library-arm run with the real start times of a public trace, and an experiment's arms."""

from __future__ import annotations

import json
from itertools import groupby
from pathlib import Path

import pytest
from samples import sample_store, small_net

import tracker.experiment
from tracker.cli import cli
from tracker.gpu.workload import Workload
from tracker.profile import profile_workload
from tracker.store import launch_rows, layer_rows, metric_rows, open_store
from tracker.store.queries import experiment_arm_runs

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


@pytest.mark.parametrize("fmt", ["perfetto", "chrome"])
def test_one_of_our_runs_with_counters_laid_end_to_end(fmt, tmp_path, runner):
    """The public K20c nvprof sample as our run: 12 launches in 3 iterations, 10 counters each,
    durations only, so laid end to end, and the file says so."""
    db = str(tmp_path / "t.db")
    run_id = sample_store(db)
    found = exported(runner, db, str(run_id), fmt, tmp_path)
    assert list(found) == [1] and "alexnet batch 1, ours, Tesla K20c" in found[1]["name"]
    check(found[1], open_store(db, write=False), run_id)
    assert sum(1 for s in found[1]["tracks"]["GPU"] if s[0] == 3) == 12 and len(found[1]["counters"]) >= 10
    if fmt == "chrome":
        notes = json.loads((tmp_path / "timeline.json").read_text())["otherData"]
        assert any("laid end to end" in note for note in notes.values())


@pytest.mark.slow  # the CPU emulation
@pytest.mark.parametrize("fmt", ["perfetto", "chrome"])
def test_a_library_run_keeps_the_real_starts_of_its_trace(fmt, gpu_seams, tmp_path, runner):
    """The library arm's launches carry the public A100 trace's own start times: gaps between
    kernels stay gaps on the timeline."""
    db = str(tmp_path / "t.db")
    workload = Workload.of(small_net(), 1, phases="fwd", repeat=2, warmup=0, implementation="torch")
    run_id = profile_workload(db, workload, backend="events").run_id
    store = open_store(db, write=False)
    starts = [k["start_ns"] for k in launch_rows(store, run_id)]
    assert None not in starts and starts[0] == 0 and starts == sorted(starts)
    found = exported(runner, db, str(run_id), fmt, tmp_path)
    check(found[1], store, run_id)
    launches = [s for s in found[1]["tracks"]["GPU"] if s[0] == 3]
    gaps = [b[2] - (a[2] + a[3]) for a, b in zip(launches, launches[1:])]
    assert max(gaps) > 0  # a real trace has idle time between some kernels
    assert len(found[1]["tracks"]) == 2  # cuDNN's FFT ran two transforms on two streams at once: a lane


@pytest.mark.slow  # the CPU emulation
@pytest.mark.parametrize("fmt", ["perfetto", "chrome"])
def test_an_experiment_is_one_process_per_arm_each_from_zero(fmt, gpu_seams, tmp_path, runner):
    db = str(tmp_path / "t.db")
    experiment = tracker.experiment.run_experiment(db, "library", small_net(), 1, repeat=2, warmup=0)
    store = open_store(db, write=False)
    arms = experiment_arm_runs(store, experiment)
    found = exported(runner, db, f"e{experiment}", fmt, tmp_path)
    assert sorted(found) == list(range(1, len(arms) + 1)) and len(arms) == 3
    for pid, (arm, run_id) in enumerate(arms, 1):
        assert found[pid]["name"].startswith(f"{arm}: run {run_id}:")
        check(found[pid], store, run_id)
        assert found[pid]["tracks"]["GPU"][0][2] == 0


def test_an_imported_report_is_laid_end_to_end_with_its_counters(tmp_path, runner):
    """The public V100 Nsight Compute report, imported: ncu's report holds no start times (it
    serializes the kernels it replays) and this one no durations either, so its launches are laid
    end to end at no width, each with its counters. (Perfetto's begin and end events nest them; a
    Trace Event reader cannot nest slices of no width at one instant, so only Perfetto's is read.)"""
    fmt = "perfetto"
    pytest.importorskip("ncu_report")
    db = str(tmp_path / "t.db")
    report = Path(__file__).parent / "data" / "ncu" / "ncu-report-v100-ncu2020.1-nvtx-dram.ncu-rep"
    assert runner.invoke(cli, ["import", str(report), "--db", db]).exit_code == 0
    found = exported(runner, db, "1", fmt, tmp_path)
    store = open_store(db, write=False)
    tracks, counters = expected(store, 1)
    assert found[1]["tracks"] == tracks and sum(1 for s in tracks["GPU"] if s[0] == 3) == 8
    assert {name: [v for _, v in steps] for name, steps in found[1]["counters"].items()} == {
        name: [v for _, v in values] for name, values in counters.items()
    }  # at one instant, one value a launch, in invocation order


def test_a_timeline_is_refused_in_one_line_where_it_cannot_be_written(tmp_path, runner):
    db = str(tmp_path / "t.db")
    sample_store(db)
    for args, message in (
        (["--format", "perfetto", "--out", str(tmp_path / "x.json")], "name a .pftrace file"),
        (["--format", "chrome", "--out", str(tmp_path / "nowhere" / "x.json")], "does not exist"),
        (["e9", "--format", "chrome"], "experiment"),
    ):
        done = runner.invoke(cli, ["export", *(args if args[0] == "e9" else ["1", *args]), "--db", db])
        assert done.exit_code != 0 and done.output.startswith("Error: ") and message in done.output, done.output
        assert len(done.output.strip().splitlines()) == 1
    target = tmp_path / "t.pftrace"
    target.write_text("keep me")
    done = runner.invoke(cli, ["export", "1", "--format", "perfetto", "--out", str(target), "--db", db])
    assert done.exit_code == 1 and "--force overwrites it" in done.output and target.read_text() == "keep me"
    done = runner.invoke(cli, ["export", "1", "--format", "perfetto", "--out", str(target), "--db", db, "--force"])
    assert done.exit_code == 0 and target.read_bytes() != b"keep me"
