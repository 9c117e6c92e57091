"""The CUPTI collector (tracker/profilers/cupti_collector.py) on the CPU emulation, with a
stand-in for CUPTI's session: `tracker profile --backend cupti`'s pass 2 replays each layer phase
once per pass, and the ranges join onto pass 1's launches, stored with ncu's names as their sources.
What CUPTI itself counts needs a GPU (tests/test_gpu.py)."""

from __future__ import annotations

import pytest
from samples import tiny_net

from tracker.errors import JoinError
from tracker.gpu.network import PlanRunner
from tracker.gpu.runner import measure
from tracker.gpu.workload import Workload
from tracker.implementations.child import ProfiledWorkload
from tracker.implementations.ours import OurKernels
from tracker.profilers import COLLECTORS, counted, for_device
from tracker.profilers.cupti_collector import CuptiCollector

pytestmark = pytest.mark.slow  # the CPU emulation


class StandInSession:
    """CUPTI as the collector sees it: ``passes`` passes a step, then a range per launch of the
    step's last pass, numbered as auto range numbers them on an H200 ('0', '1', ..., on across the
    steps: tests/data/gpu-2026-11-26d-h200), with made-up values under ncu's names; ``drop``: the
    first step with a launch loses its last range."""

    def __init__(self, emulator, metrics: list[str], most: int, passes: int = 2, drop: bool = False):
        self.b, self.metrics, self.most, self.passes, self.drop = emulator, metrics, most, passes, drop
        self.skipped = ["smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio"]
        self.settings = {"range": "auto", "replay": "user", "passes": passes}
        self.steps, self.numbered = 0, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def begin(self) -> None:
        self.count, self.steps = 0, self.steps + 1

    def start(self) -> None:
        self.first = len(self.b.log)

    def stop(self) -> bool:
        self.count += 1
        self.ran = self.b.log[self.first :]
        return self.count == self.passes

    def ranges(self):
        assert len(self.ran) <= self.most
        ran = self.ran[:-1] if self.drop and self.ran else self.ran
        self.drop = self.drop and not self.ran
        first, self.numbered = self.numbered, self.numbered + len(ran)
        return [
            (str(first + i), {"smsp__inst_executed.sum": 32.0, "gpu__time_duration.sum": 1000.0})
            for i in range(len(ran))
        ]


@pytest.fixture
def pass1(emulator):
    """Pass 1 of the tiny net on the emulation: the workload as planned, and its launch log."""
    from tracker.gpu.network import plan

    net = tiny_net()
    workload = Workload.of(net, batch=2, repeat=2, warmup=0)
    workload = workload.planned(plan(net, workload.variants, workload.phases, 2), {})
    launches, _ = measure(
        PlanRunner.of(emulator, workload), workload.repeat, workload.warmup, workload.l1_policy, lambda line: None
    )
    return counted(workload, launches, 1)


def collected(emulator, workload, launches, echo, **stand_in):
    """The collector's counters for the workload, our kernels replayed on the emulation and
    counted by the stand-in session."""
    ours = OurKernels(
        backend=lambda l1_policy: emulator,
        session=lambda metrics, most: StandInSession(emulator, metrics, most, **stand_in),
    )
    return CuptiCollector("libcupti 13.5 (a stand-in)").collect(ProfiledWorkload(workload, ours), launches, 9.0, echo)


def test_each_layer_phase_is_replayed_per_pass_and_its_ranges_join_pass_1s_launches(emulator, pass1):
    workload, launches = pass1
    said: list[str] = []
    counters = collected(emulator, workload, launches, said.append, passes=3)
    assert len({r["invocation"] for r in counters.rows}) == len(launches) > 0
    assert {r["name"] for r in counters.rows} == {"instructions", "duration_ns"}  # ncu's names, the catalog's
    assert counters.sources == {"instructions": "smsp__inst_executed.sum", "duration_ns": "gpu__time_duration.sum"}
    assert counters.run_fields == {
        "collector_version": "libcupti 13.5 (a stand-in)",
        "collector_settings": {"range": "auto", "replay": "user", "passes": 3},
    }
    assert counters.skipped and any("CUPTI does not know 1 catalog metrics" in line for line in said)


def test_a_layer_phase_with_a_range_short_of_pass_1s_launches_fails_the_join(emulator, pass1):
    """Auto range names no kernel, so the number of a phase's ranges is what ties them to pass 1."""
    workload, launches = pass1
    first = launches[0]
    count = sum(1 for k in launches if (k.range, k.repeat) == (first.range, 0))
    with pytest.raises(
        JoinError,
        match=rf"^{first.range} \(iteration 1\): pass 1 launched {count} kernels, "
        rf"CUPTI counted {count - 1} ranges$",
    ):
        collected(emulator, workload, launches, lambda line: None, drop=True)


def test_a_phases_ranges_are_in_launch_order_when_numbered_on_from_the_last():
    """What the H200 named (conv1's forward '0', relu1's '2'), and what auto range never names."""
    from tracker.profilers.cupti_collector import _in_launch_order

    assert _in_launch_order(["0"]) and _in_launch_order(["2"]) and _in_launch_order(["7", "8", "9"])
    assert not _in_launch_order(["3", "5"]) and not _in_launch_order(["1", "0"])
    assert not _in_launch_order(["conv2d_fwd_implicit"]) and not _in_launch_order(["-1"])


def test_auto_never_picks_it_before_it_has_been_proven():
    assert list(COLLECTORS)[-1] == "cupti" and {for_device(cc) for cc in (3.5, 7.0, 8.0, 9.0)} == {"nvprof", "ncu"}


def test_found_it_names_the_libcupti_it_loaded():
    from tracker.profilers import find

    assert find("cupti").version.startswith("libcupti of nvidia-cuda-cupti 13.")


def test_the_session_asks_cupti_only_for_the_metric_types_it_defines(monkeypatch):
    """CUpti_MetricType ends in a count, not a type; asked for its base metrics, CUPTI answered
    ERROR_INVALID_PARAMETER on an H200 (tests/data/gpu-2026-11-26c-h200/cupti-probe.log, through
    cupti-python's enum, which holds it)."""
    from types import SimpleNamespace

    from tracker.profilers import cupti_session

    asked = []

    def struct(name, **values):
        asked.append((name, values.get("metricType")))
        return SimpleNamespace(
            ppMetricNames=[f"metric{values.get('metricType')}".encode()], numMetrics=1, pHostObject=7
        )

    monkeypatch.setattr(cupti_session, "_struct", struct)
    host = cupti_session.Host("GH100")
    assert host.base_metrics() == {"metric0", "metric1", "metric2"}
    assert [kind for name, kind in asked if name.endswith("GetBaseMetrics_Params")] == [0, 1, 2]
