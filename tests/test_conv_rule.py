"""The default plan's conv rule (tracker/ops/conv_rule.py) against the measurements it was read
from, and the plan it makes: recorded in every run, predicted by the model, overridden by
--variant and `tracker tune`, left out by --untuned."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tracker.profile
from tracker.gpu.network import algorithms, plan, plan_of
from tracker.model import predict
from tracker.nets import build
from tracker.ops import OPS
from tracker.ops.conv_rule import SOURCE
from tracker.store import open_store
from tracker.store.schema import Prediction, Run

ROOT = Path(__file__).parents[1]
NET = build("alexnet")


def measured() -> dict[tuple[str, str], dict[str, float]]:
    """(layer, phase) -> variant -> median ms, from the benchmark table the rule was read from."""
    found = {}
    for line in (ROOT / SOURCE).read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) > 2 and re.fullmatch(r"conv\d", cells[0]):
            times = re.findall(r"(\w+) ([\d.]+) \(", cells[2])
            if times:  # the variants table, not the transforms' below it
                found[cells[0], cells[1]] = {v: float(ms) for v, ms in times}
    return found


def test_the_rule_picks_what_its_recording_measured_fastest_or_near_it():
    table, conv = measured(), OPS["conv"]
    assert len(table) == 14  # conv1 has no data gradient
    ruled_ms = default_ms = best_ms = 0.0
    fastest = 0
    for (layer, phase), times in table.items():
        case = conv.case(NET.layer(layer), 128)
        applying = {v: ms for v, ms in times.items() if v in conv.rivals(case, phase)}  # others ran another's kernels
        chosen = conv.ruled(case, phase)
        assert chosen in applying, (layer, phase, chosen)
        assert applying[chosen] <= 1.15 * min(applying.values()), (layer, phase, chosen, applying)
        fastest += applying[chosen] == min(applying.values())
        ruled_ms += applying[chosen]
        default_ms += applying[conv.default]
        best_ms += min(applying.values())
    assert fastest == 12  # winograd_f4 at 10 of conv2-5's 12 phases, the implicit GEMM at both of conv1's
    # the conv phases of a step: 35.9 ms by the implicit GEMM, 23.3 by the rule, 23.0 at the fastest of each
    assert (round(default_ms, 1), round(ruled_ms, 1), round(best_ms, 1)) == (35.9, 23.3, 23.0)


def test_the_plan_runs_the_rule_where_nothing_chose_otherwise():
    ruled = {(s.layer.name, s.phase): s.variant for s in plan(NET, {}, batch=128, by_rule=True)}
    assert ruled["conv1", "fwd"] == ruled["conv1", "bwd_weight"] == "shared"  # stride 4: no Winograd
    assert {v for (layer, _), v in ruled.items() if layer in ("conv2", "conv3", "conv4", "conv5")} == {"winograd_f4"}
    assert ruled["lrn1", "fwd"] == "shared" and ruled["relu1", "fwd"] == "global"  # ops without a rule
    pinned = {s.variant for s in plan(NET, {"conv": "shared"}, batch=128, by_rule=True) if s.layer.kind == "conv"}
    assert pinned == {"shared"}  # --variant chose the op's
    fused = plan(NET, {"conv": "fused"}, batch=128, by_rule=True)
    assert {s.variant for s in fused if s.layer.kind == "relu"} >= {"fused-into-previous"}
    assert {s.variant for s in plan(NET, {}, batch=128) if s.layer.kind == "conv"} == {"shared"}  # --untuned


def test_the_model_predicts_the_planned_algorithm():
    planned = plan_of(plan(NET, {}, batch=128, by_rule=True))
    named = algorithms(NET, planned, 128)
    assert set(named.values()) == {"winograd_f4"} and len(named) == 12  # conv1's implicit GEMM is the plain count
    rows = {(p.layer, p.phase): p for p in predict(NET, 128, algorithm=named)}
    plain = {(p.layer, p.phase): p for p in predict(NET, 128)}
    winograd = {(p.layer, p.phase): p for p in predict(NET, 128, algorithm="winograd_f4")}
    for key, row in rows.items():
        expected = winograd[key] if f"{key[0]}/{key[1]}" in named else plain[key]
        assert (row.macs, row.ops, row.bytes) == (expected.macs, expected.ops, expected.bytes), key
    assert rows["conv2", "fwd"].macs < plain["conv2", "fwd"].macs / 4  # F(4x4,5x5): 3,136 of 18,225 multiplies


@pytest.mark.parametrize("untuned", [False, True])
def test_a_model_run_records_its_plan_and_predicts_it(tmp_path, untuned):
    db = str(tmp_path / "t.db")
    run_id = tracker.profile.profile(db, NET, 128, backend="model", untuned=untuned).run_id
    with open_store(db, write=False).session() as session:
        run = session.get(Run, run_id)
        conventions = {
            p.layer_id: p.convention for p in session.query(Prediction).filter_by(run_id=run_id, phase="fwd")
        }
    assert run.plan == plan_of(plan(NET, {}, batch=128, by_rule=not untuned))
    conv2 = NET.layer("conv2").id
    assert conventions[conv2].startswith("winograd_f4") != untuned
