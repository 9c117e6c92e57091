"""docs/ARCHITECTURE.md's "Where a new thing goes" holds: a toy view, op variant and collector,
each built from its row's steps alone, is picked up everywhere the row says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from samples import small_net

from tracker.cli import cli
from tracker.model import lookup
from tracker.profile import profile
from tracker.store import find_run, open_store, run_dict, run_sql

ROOT = Path(__file__).parent.parent


def recipe(thing: str) -> str:
    """The row of ``thing`` in the page's "Where a new thing goes"."""
    page = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    rows = page[page.index("## Where a new thing goes") :].split("\n- **")
    return next(row for row in rows if row.startswith(f"{thing}**"))


# A view: `store/views.py` (a View in VIEWS); `python -m tracker.store.contract` renders it.
# Picked up by `tracker sql`, `analysis.view`, export.


def test_a_new_view_is_read_by_tracker_sql_analysis_and_export(tmp_path, monkeypatch, runner):
    from tracker.analysis import view
    from tracker.export import export
    from tracker.store import views
    from tracker.store.contract import views_sql

    assert "`store/views.py`" in recipe("a view") and "Picked up by\n  `tracker sql`, `analysis.view`, export" in (
        recipe("a view")
    )
    toy = views.View(
        "toy_layer_count",
        "Layers per run (a toy).",
        "SELECT run_id, COUNT(*) AS layers FROM layer GROUP BY run_id",
        ("run_id",),
    )
    monkeypatch.setattr(views, "VIEWS", (*views.VIEWS, toy))
    db = str(tmp_path / "trace.db")
    run = profile(db, small_net(), 2, backend="model", device=lookup("h100")).run_id
    said = runner.invoke(cli, ["sql", "SELECT layers FROM toy_layer_count", "--db", db, "--format", "json"])
    assert said.exit_code == 0 and json.loads(said.output) == [{"layers": len(small_net().layers)}], said.output
    assert list(view(open_store(db, write=False), "toy_layer_count", run).layers) == [len(small_net().layers)]
    written = export(open_store(db, write=False), run, tmp_path / "out", "csv")
    assert (tmp_path / "out" / "toy_layer_count.csv") in written
    assert "CREATE VIEW toy_layer_count" in views_sql()  # what `python -m tracker.store.contract` writes


# An op variant: `ops/<op>.py`: `OP.add("name", fwd=launch(...), ...)`, its kernel in kernels/<op>.cu.
# Picked up by --variant, the plan, the selftest, the compile check, `tracker kernels`, the experiments.


@pytest.fixture
def toy_relu():
    """A ReLU variant registered as the row says, on relu.cu's kernels; gone after the test."""
    from tracker.ops import OPS
    from tracker.ops.launch import THREADS, blocks
    from tracker.ops.registry import launch

    def fwd(b, a):
        b.launch("relu.cu", "relu_fwd_global", (blocks(a.x.size // 4 + 1),), (THREADS,), (a.x, a.y, a.x.size))

    def bwd(b, a):
        b.launch("relu.cu", "relu_bwd_global", (blocks(a.dy.size // 4 + 1),), (THREADS,), (a.dy, a.y, a.dx, a.dy.size))

    relu = OPS["relu"]
    relu.add("toy", fwd=launch(fwd, "relu.cu:relu_fwd_global"), bwd_data=launch(bwd, "relu.cu:relu_bwd_global"))
    yield relu
    del relu.variants["toy"]


@pytest.mark.slow  # the CPU emulation
def test_a_new_variant_is_chosen_planned_checked_listed_and_profiled(
    toy_relu, emulator, emulated_events, tmp_path, runner
):
    from tracker.experiment import kind_arms
    from tracker.gpu.network import plan
    from tracker.ops import OPS
    from tracker.ops.selftest import run_case

    row = recipe("an op variant")
    assert 'OP.add("name", fwd=launch(...), ...)' in row and "`--variant`, the plan, the selftest" in row
    assert OPS.parse_variants("relu=toy") == {"relu": "toy"} and "toy" in OPS.variant_names()
    assert {s.variant for s in plan(small_net(), {"relu": "toy"}) if s.layer.kind == "relu"} == {"toy"}
    assert all(r.passed for r in run_case(emulator, toy_relu.small_cases[0], "toy"))
    assert {(k.variant, k.phase) for k in OPS.launches() if k.op == "relu"} >= {("toy", "fwd"), ("toy", "bwd_data")}
    assert "toy" in {arm.label for arm in kind_arms("variants", 2)}
    db = str(tmp_path / "trace.db")
    profile(db, small_net(), 2, backend="events", variants={"relu": "toy"})
    _, rows = run_sql(open_store(db, write=False), "SELECT DISTINCT variant FROM launch WHERE kernel_name LIKE 'relu%'")
    assert rows == [("toy",)]


# A collector: one module in profilers/ (supports(cc), find(options), SOURCES, a class with
# collect(target, launches, cc, echo)) and its line in profilers.COLLECTORS. Picked up by --backend,
# auto's choice by compute capability, pass 2, `tracker metrics`, metric_source.

TOY_COLLECTOR = '''
"""A toy collector: each launch's duration is its invocation number, in ns."""
from dataclasses import dataclass

from tracker.metrics import Source, Sources
from tracker.profilers import Counters
from tracker.profilers.join import join
from tracker.profilers.ncu_csv import ProfiledLaunch

SOURCES = Sources("toy", (Source("duration_ns", "toy_ns"),))


def supports(compute_capability):
    return compute_capability >= 99.0  # auto picks it only for a GPU of the future


def find(options):
    return ToyCollector()


@dataclass(frozen=True)
class ToyCollector:
    name: str = "toy"
    version: str = "toy 1.0"

    def describe(self):
        return "the toy collector"

    def collect(self, target, launches, compute_capability, echo):
        assert target.command()[-2] == "profiled"  # the child a real profiler would wrap
        printed = [{"toy_ns": float(i)} for i in range(len(launches))]  # what the toy tool said, parsed
        profiled = [
            ProfiledLaunch(i, k.kernel_name, metrics=SOURCES.translate(printed[i])) for i, k in enumerate(launches)
        ]
        rows = join(launches, profiled, None)
        return Counters(rows, {"collector_version": self.version}, SOURCES.names({r["name"] for r in rows}), [])
'''

# tracker in a process of its own, the toy's line first in COLLECTORS before anything reads the table,
# the GPU stood in for as conftest's emulated_events does: pass 1 on the CPU emulation, on a device
# of compute capability 99 that only the toy supports.
TOY_RUN = """
import sys
sys.path[:0] = [{toy!r}, {tests!r}]
from tracker import profilers
profilers.COLLECTORS = {{"toy": "toy_collector", **profilers.COLLECTORS}}  # first: auto takes the first that fits

import tracker.gpu.detect, tracker.gpu.runner, tracker.profile
from dataclasses import replace
from made_up_times import made_up_ms
from pathlib import Path
from emu.emulator import Emulator
from tracker.gpu.network import PlanRunner
from tracker.gpu.runner import Measured, measure

build = Path({emu!r})  # a folder of its own: copying a library over one another process loaded crashes it
build.mkdir(exist_ok=True)  # each call is its own process, one after another
emulator = Emulator(build)
device = {{"device_name": "emulation", "compute_capability": "99.0"}}

def profile_events(workload, echo):
    run = PlanRunner.of(emulator, workload)
    launches, _ = measure(run, workload.repeat, workload.warmup, workload.l1_policy, echo)
    return Measured([replace(k, time_ms=made_up_ms(k.row())) for k in launches], device, 0)

tracker.gpu.runner.profile_events = profile_events
tracker.profile.require_gpu = lambda what: "1 CUDA device(s) (the emulation)"
tracker.gpu.detect.compute_capability = lambda: 99.0
if sys.argv[1] == "emulated":  # tracker profile's library call, on a network small enough to emulate
    from samples import small_net
    from tracker.profile import profile
    profile(sys.argv[3], small_net(), 2, backend=sys.argv[2], echo=print)
else:
    from tracker.cli import cli
    cli(sys.argv[1:])
"""


@pytest.mark.slow  # the CPU emulation, in a process of its own
def test_a_new_collector_is_a_backend_autos_choice_and_pass_2(emulator, tmp_path):
    row = recipe("a collector")
    assert "one module in `profilers/`" in row and "its line in\n  `profilers.COLLECTORS`" in row
    (tmp_path / "toy_collector.py").write_text(TOY_COLLECTOR)
    script = tmp_path / "run.py"
    script.write_text(TOY_RUN.format(toy=str(tmp_path), tests=str(ROOT / "tests"), emu=str(tmp_path / "emu")))
    db = str(tmp_path / "trace.db")

    def tracker(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=600)

    helped = tracker("profile", "--help")
    assert "--backend [auto|toy|ncu|nvprof|cupti|events|model]" in helped.stdout, helped.stdout + helped.stderr
    for backend in ("toy", "auto"):  # by name, and auto's choice on a GPU only it supports
        done = tracker("emulated", backend, db)
        assert done.returncode == 0 and "backend: toy" in done.stdout, done.stdout + done.stderr
    store = open_store(db, write=False)
    assert run_dict(find_run(store, "last"))["backend"] == "toy"
    _, rows = run_sql(store, "SELECT DISTINCT name, source FROM metric_source")
    assert rows == [("duration_ns", "toy_ns")]
    _, counted = run_sql(store, "SELECT COUNT(*) FROM metric WHERE name = 'duration_ns' AND run_id = 2")
    assert counted[0][0] > 0
    listed = tracker("metrics", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert {row["name"]: row["toy"] for row in json.loads(listed.stdout) if row["toy"]} == {"duration_ns": "toy_ns"}
