"""An experiment's report: its settings and arms in words, and the sections of its kind (a batch
sweep, a memory sweep, or arms compared against a baseline)."""

from __future__ import annotations

import pandas as pd

from tracker import units
from tracker.analysis import experiments, run_row
from tracker.errors import StoreError
from tracker.figures import bars
from tracker.report.comparison_report import roofline_moves, speedup_finding
from tracker.report.document import Report, Section
from tracker.report.run_report import describe
from tracker.stats import best_of, tie
from tracker.store import Store, experiment_dict, find_experiment


def applied(settings: dict) -> dict:
    """An experiment's settings that apply to its arms: its batch sweep in place of the single
    batch, ncu's settings only where ncu ran, repeats and warm-ups only where something ran (not
    on the model), no empty axis."""
    shown = {k: v for k, v in settings.items() if v not in (None, [], {})}
    if shown.get("batches"):
        shown.pop("batch", None)
    if shown.get("backend") == "model":
        shown = {k: v for k, v in shown.items() if k not in ("repeat", "warmup")}
    if shown.get("backend") != "ncu":
        shown = {k: v for k, v in shown.items() if not k.startswith("ncu_")}
    return shown


def _experiment_about(info: dict, arms: pd.DataFrame) -> dict:
    settings = {k: (", ".join(map(str, v)) if isinstance(v, list) else v) for k, v in applied(info["settings"]).items()}
    return {
        "experiment": f"e{info['id']}",
        "kind": info["kind"],
        "status": info["status"],
        "network": info["network"],
        **settings,
        "runs": ", ".join(f"{r.arm}: run {r.run_id}" for r in arms.itertuples()),
    }


def for_experiment(store: Store, experiment_id: int) -> Report:
    info = experiment_dict(find_experiment(store, experiment_id))
    arms = experiments.runs(store, experiment_id)
    if arms.empty:
        raise StoreError(f"experiment e{experiment_id} ({info['status']}) has no completed run to report on")
    base = run_row(store, int(arms[arms["baseline"].astype(bool)]["run_id"].iloc[0]))
    batches = sorted(set(arms["batch"]))
    batch_words = f"batch {batches[0]}" if len(batches) == 1 else "batches " + ", ".join(map(str, batches))
    device = base["device_name"] or "no device"
    sub = f"{info['network']}, {batch_words}, {device}, {base['backend']}; experiment e{experiment_id} {info['kind']}"
    summary = (
        f"Experiment e{experiment_id} ({info['kind']}, {info['status']}): {info['network']} at {batch_words} "
        f"on {device}, {len(arms)} runs ({', '.join(f'{r.arm}: run {r.run_id}' for r in arms.itertuples())}); "
        f"the baseline run: {describe(base)}"
    )
    sections = (
        _batch_sections(store, experiment_id, batches, sub)
        if info["kind"] == "batch"
        else _memory_sections(store, experiment_id, sub)
        if info["kind"] == "memory"
        else _arm_sections(store, experiment_id, info["kind"], sub)
    )
    return Report(
        f"Experiment e{experiment_id}: {info['kind']} on {info['network']}",
        summary,
        _experiment_about(info, arms),
        sections,
        f"tracker profile {info['network']} --backend ncu",
    )


def _batch_sections(store, experiment_id: int, batches: list[int], sub: str) -> list[Section]:
    frame = experiments.scaling(store, experiment_id)
    totals = experiments.batch_totals(frame).sort_values("batch")
    finding = "time per image over the iteration: " + ", ".join(
        f"batch {r.batch}: {units.milliseconds(r.ms_per_image)} ({units.count(r.images_per_s)} images/s)"
        for r in totals.itertuples()
    )
    title = "Time per image per layer at batch " + ", ".join(map(str, batches))
    wide = frame.pivot_table(index=["layer_id", "layer", "phase"], columns="batch", values="ms_per_image")
    wide.columns = [f"batch_{b}_per_image_ms" for b in wide.columns]
    return [
        Section(
            "batch_runtime",
            title,
            "Figures 6/7",
            bars.batch(frame, totals, title, sub),
            finding,
            wide.reset_index().drop(columns=["layer_id"]),
        )
    ]


def _memory_sections(store, experiment_id: int, sub: str) -> list[Section]:
    """Paper 002's figure: each arm's peak memory of a training step, the model's beside the one
    measured (none on the model backend), over the options and batch sizes the experiment swept."""
    frame = experiments.memory(store, experiment_id)
    long = pd.concat(
        [
            frame.assign(source=source, peak_bytes=frame[column])
            for source, column in (("predicted", "predicted_peak_bytes"), ("measured", "measured_peak_bytes"))
        ]
    )
    long = long.assign(layer=long["arm"], phase="step")[["layer", "phase", "source", "peak_bytes"]]
    title = "Peak memory of a training step per arm: the model's and the measured"
    out = frame[frame["state"] != "complete"]
    finding = (
        experiments.memory_finding(store, experiment_id)
        + f"; {len(frame) - len(out)} of {len(frame)} arms complete"
        + (f"; out of memory or failed: {', '.join(out['arm'])}" if not out.empty else "")
    )
    ratios = frame["measured_over_predicted"].dropna()
    if not ratios.empty:
        finding += f"; measured / predicted {ratios.min():.2f} to {ratios.max():.2f}"
    return [
        Section(
            "memory_peak",
            title,
            "paper 002",
            bars.grouped(long, "peak_bytes", "source", title, sub, "peak"),
            finding,
            frame,
        )
    ]


TITLES = {
    "l1-bypass": ("L1 bypass (-dlcm=cg) speedup per layer", "paper 003 section 4 (6.2 %)"),
    "variants": ("Kernel variants against global", "memory placement"),
    "fusion": ("Fusion speedup per layer", "paper 003 section 4"),
    "library": ("PyTorch (cuDNN, cuBLAS) against our kernels per layer", "paper 003's library study"),
    "algorithms": ("Convolution algorithms against the default per layer", "paper 004 Figs. 8/9"),
}


def _algorithm_figures(frame: pd.DataFrame, sub: str) -> list[Section]:
    """Paper 004's Fig. 8 (time per conv layer phase and algorithm) and Fig. 9 (the workspace each
    holds, from the model), from the experiment's runs."""
    long = experiments.per_algorithm(frame)
    if long.empty:
        return []
    timed = long[long["ms"].notna()]
    finding = "fastest per conv layer phase: " + ", ".join(
        f"{layer} {phase} {tie(arms.iloc[best_of(arms['ms'].tolist())]['arm'].tolist())} "
        f"({units.milliseconds(arms['ms'].min())})"
        for (layer, phase), arms in timed.groupby(["layer", "phase"], sort=False)
    )
    time_title, memory_title = "Time per conv layer phase and algorithm", "Workspace per conv layer phase and algorithm"
    table = long.drop(columns=["layer_id", "workspace_mib"])
    return [
        Section(
            "algorithm_time",
            time_title,
            "paper 004 Fig. 8",
            bars.grouped(long, "ms", "arm", time_title, sub, "time (ms)", log=True),
            finding,
            table,
        ),
        Section(
            "algorithm_workspace",
            memory_title,
            "paper 004 Fig. 9",
            bars.grouped(
                long[long["workspace_mib"].notna()],
                "workspace_mib",
                "arm",
                memory_title,
                sub,
                "workspace (MiB, the model's for the algorithm that ran)",
            ),
            "workspace the algorithm that ran holds beside its operands (the analytic model's)",
        ),
    ]


def _arm_sections(store, experiment_id: int, kind: str, sub: str) -> list[Section]:
    frame = experiments.speedups(store, experiment_id)
    sections = []
    if kind == "fusion":
        pairs = experiments.fused_pairs(store, experiment_id)
        pairs = pairs.assign(change_pct=100 * (pairs["speedup"] - 1)) if not pairs.empty else pairs
        sections.append(
            Section(
                "fusion_pairs",
                "Fusion speedup per conv/fc + ReLU pair",
                "paper 003 section 4 (4.0 %)",
                bars.speedup(pairs, "Fusion: separate ReLU -> fused kernel", sub),
                speedup_finding(pd.concat([pairs, frame[frame["layer"] == "iteration"]])),
                pairs.drop(columns=["layer_id"], errors="ignore"),
            )
        )
    title, paper = TITLES[kind]
    if kind == "algorithms":
        frame = experiments.algorithms(store, experiment_id)
    columns = [
        "comparison",
        "arm",
        "layer",
        "phase",
        "algorithm_a",
        "algorithm_b",
        "a_ms",
        "b_ms",
        "spread_pct_a",
        "spread_pct_b",
        "speedup",
        "change_pct",
        "noise",
        "workspace_bytes_b",
        "max_error_b",
        *experiments.CUDNN_COLUMNS,
        "l1_hit_rate_change",
        "l2_hit_rate_change",
        "first_reason_a",
        "first_reason_b",
    ]
    columns = [c for c in columns if c in frame.columns]
    layers = frame[frame["layer"] != "iteration"] if not frame.empty else frame
    sections.append(
        Section(
            kind.replace("-", "_"),
            title,
            paper,
            bars.speedup(layers, title, sub),
            speedup_finding(frame),
            frame[columns] if not frame.empty else None,
        )
    )
    if kind == "algorithms":
        sections += _algorithm_figures(frame, sub)
    for base, other in experiments.pairs(store, experiment_id):
        what = f" ({base.comparison}: {base.arm} -> {other.arm})"
        sections.append(
            roofline_moves(store, int(base.run_id), int(other.run_id), f"roofline_{other.run_id}", sub, what)
        )
    return sections
