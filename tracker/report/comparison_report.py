"""A report on a run against another: run B's speedup over run A, both runs' efficiency side by
side, and B's roofline moves (which an experiment's report draws for each pair of its arms too)."""

from __future__ import annotations

import pandas as pd

from tracker.analysis import roofline, speedup
from tracker.figures import bars
from tracker.figures.roofline import roofline as roofline_figure
from tracker.implementations import of_run
from tracker.report.document import Section
from tracker.report.run_report import EFFICIENCY_PANELS, ReportedRun, efficiency_finding


def speedup_finding(frame: pd.DataFrame) -> str:
    layers = frame[frame["layer"] != "iteration"].dropna(subset=["speedup"])
    if layers.empty:
        return "no comparable times"
    top = layers.loc[layers["change_pct"].abs().idxmax()]
    noise = layers["noise"].fillna(False).astype(bool)
    total = frame[frame["layer"] == "iteration"]
    whole = (
        f"; whole iteration {total['change_pct'].iloc[0]:+.1f}%"
        if not total.empty and pd.notna(total["change_pct"].iloc[0])
        else ""
    )
    return (
        f"largest change: {top['layer']} {top['phase']} {top['change_pct']:+.1f}%"
        f"{' (within noise)' if top['noise'] is True else ''}; {int(noise.sum())} of {len(layers)} layer phases "
        f"within the run-to-run spread{whole}"
    )


def for_comparison(a: ReportedRun, b: ReportedRun) -> list[Section]:
    """Run B's speedup over run A (per image when their batch sizes differ), and B's roofline moves."""
    both = speedup.comparison(a.store, a.id, b.id)
    per = both["basis"].iloc[0]
    sub = f"run {b.id} ({b.sub}) over run {a.id} ({a.sub}); times {per}"
    title = f"Speedup of run {b.id} over run {a.id}, {per}"
    table = both[["layer", "phase", "a_ms", "b_ms", "spread_pct_a", "spread_pct_b", "speedup", "change_pct", "noise"]]
    return [
        Section(
            "speedup",
            title,
            "Figure 8",
            bars.speedup(both[both["layer"] != "iteration"], title, sub),
            speedup_finding(both),
            table,
        ),
        _side_by_side(a, b, sub),
        roofline_moves(a.store, a.id, b.id, "roofline_moves", sub),
    ]


def _side_by_side(a: ReportedRun, b: ReportedRun, sub: str) -> Section:
    """Paper 001's per-layer figure for both runs (ours tuned beside cuDNN's, in a U-Net's report):
    each layer phase's time, its FLOP/s against the FP32 peak and its share of the step."""
    label = {a.id: f"run {a.id}: {_implementation(a.row)}", b.id: f"run {b.id}: {_implementation(b.row)}"}
    frame = pd.concat(
        [roofline.efficiency(run.store, run.id).assign(run=label[run.id]) for run in (a, b)], ignore_index=True
    )
    title = f"Time, FLOP/s against the FP32 peak, and share of the step: run {a.id} beside run {b.id}"
    if frame.empty:
        return Section("efficiency_side_by_side", title, "paper 001", None, "no times")
    finding = "; ".join(efficiency_finding(part, f"{name}: ") for name, part in frame.groupby("run", sort=False))
    return Section(
        "efficiency_side_by_side",
        title,
        "paper 001",
        bars.grouped(frame, "ms", "run", title, sub, "time", panels=EFFICIENCY_PANELS),
        finding,
        frame.drop(columns=["layer_id"]),
    )


def _implementation(run: pd.Series) -> str:
    """Whose kernels a run ran, in a legend's words: 'ours' ('ours, tuned' with `tracker tune`'s
    tiles) or 'PyTorch 2.11.0 (cuDNN, cuBLAS)'."""
    return of_run(run).legend(run)


def roofline_moves(store, run_a: int, run_b: int, key: str, sub: str, what: str = "") -> Section:
    points, arrows, basis = roofline.moves(store, run_a, run_b)
    title = f"Roofline moves: run {run_a} -> run {run_b}{what}"
    figure = roofline_figure(points, roofline.roofs(store, run_b), f"{title}\n{sub}", basis, arrows)
    up = (arrows["y1"] > arrows["y0"]).sum()
    finding = f"{up} of {len(arrows)} layer phases move up (faster) from run {run_a} to run {run_b}"
    return Section(key, title, "paper 000 (★ the move per layer phase)", figure, finding)
