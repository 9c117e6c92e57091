"""What each report holds: the sections (figure, finding, table) for a run, a comparison and an
experiment, computed from tracker/analysis."""

from __future__ import annotations

import pandas as pd

from tracker.analysis import (
    caches,
    experiments,
    fp,
    reconcile,
    roofline,
    runtime,
    speedup,
    stalls,
    traffic,
    utilization,
)
from tracker.analysis import view as read_view
from tracker.errors import StoreError
from tracker.report import Section
from tracker.report import figures as fig
from tracker.store import Store, experiment_dict, find_experiment


def _subtitle(store: Store, run_id: int) -> str:
    run = read_view(store, "run", None).set_index("id").loc[run_id]
    device = run["device_name"] or "no device"
    return f"{run['network']}, batch {run['batch']}, {device}, backend {run['backend']} (run {run_id})"


def _about(store: Store, run_id: int) -> dict:
    run = read_view(store, "run", None).set_index("id").loc[run_id]
    keys = ("network", "batch", "device_name", "compute_capability", "backend", "backend_reason", "variants",
            "l1_bypass", "repeat", "ncu_version", "status", "started_at")
    return {"run": run_id, **{k: run[k] for k in keys}}


def _no_counters(store: Store, run_id: int) -> str:
    backend = read_view(store, "run", None).set_index("id").loc[run_id, "backend"]
    if backend in ("model", "events"):
        return f"no counters in run {run_id} (backend {backend}); profile with --backend ncu on a GPU"
    return f"run {run_id} (backend {backend}) did not collect these counters"


def _share(frame: pd.DataFrame, column: str) -> str:
    top = frame.loc[frame[column].idxmax()]
    return f"{top['layer']} {top['phase']}"


def for_run(store: Store, run_id: int) -> tuple[str, dict, list[Section]]:
    sub = _subtitle(store, run_id)
    missing = _no_counters(store, run_id)
    sections = [_runtime(store, run_id, sub), _fp(store, run_id, sub, missing), _stalls(store, run_id, sub, missing),
                _pipes(store, run_id, sub, missing), _caches(store, run_id, sub, missing),
                _traffic(store, run_id, sub, missing), _levels(store, run_id, sub, missing),
                _roofline(store, run_id, sub, missing), _reconcile(store, run_id, missing)]
    return f"Run {run_id}: {sub}", _about(store, run_id), sections


def _runtime(store, run_id, sub) -> Section:
    frame = runtime.runtime(store, run_id)
    total = runtime.iteration(store, run_id)
    known = frame[frame["ms"].notna()]
    if known.empty:
        model = read_view(store, "run", None).set_index("id").loc[run_id, "backend"] == "model"
        return Section("runtime", "Runtime per layer", "Figures 6/7", None,
                       "no times: a model run without a device" if model else "no launch times were recorded",
                       missing="profile with --device NAME for the model's times, or on a GPU")
    top = known.loc[known["ms"].idxmax()]
    finding = (f"{top['layer']} {top['phase']} takes the most time: {top['ms']:.3g} ms, "
               f"{100 * top['ms'] / total['ms']:.0f}% of the {total['ms']:.3g} ms iteration ({top['source']})")
    table = frame[["layer", "phase", "ms", "spread_pct", "predicted_ms", "launches", "source"]]
    return Section("runtime", "Runtime per layer", "Figures 6/7", fig.runtime(frame, sub), finding, table)


def _fp(store, run_id, sub, missing) -> Section:
    frame = fp.by_kind(store, run_id)
    if frame.empty:
        return Section("fp_instructions", "FP32 instructions", "Figure 9", None, "not collected", missing=missing)
    totals = frame.groupby("instruction")["instructions"].sum()
    per_layer = frame.groupby(["layer", "phase"], as_index=False)["instructions"].sum()
    finding = (f"{totals.idxmax()} is {100 * totals.max() / totals.sum():.0f}% of FP32 instructions; "
               f"most in {_share(per_layer, 'instructions')}")
    return Section("fp_instructions", "FP32 instructions", "Figure 9", fig.fp_instructions(frame, sub), finding,
                   fp.fp_instructions(store, run_id)[["layer", "phase", "fadd", "fmul", "ffma", "flops", "model_ops",
                                                      "flops_per_model_op"]])


def _stalls(store, run_id, sub, missing) -> Section:
    frame = stalls.by_category(store, run_id)
    verdict = stalls.bound(store, run_id)
    table = verdict[["layer", "phase", "first_reason", "first_share", "second_reason", "bound", "why"]]
    if frame.empty:
        return Section("stalls", "Stall breakdown and what bounds each layer", "Figures 10/11", None,
                       "not collected; the bound column is the model's roofline verdict", table, missing)
    times = runtime.runtime(store, run_id)[["layer_id", "phase", "ms"]]
    ranked = verdict.merge(times, on=["layer_id", "phase"]).dropna(subset=["first_reason"])
    ranked = ranked.sort_values("ms", ascending=False) if ranked["ms"].notna().any() else ranked
    top = ranked.iloc[0]
    finding = (f"{top['layer']} {top['phase']}: top stalls {top['first_reason']}, {top['second_reason']} "
               f"-> {top['bound']}-bound")
    return Section("stalls", "Stall breakdown and what bounds each layer", "Figures 10/11",
                   fig.stalls(frame, sub), finding, table)


def _pipes(store, run_id, sub, missing) -> Section:
    frame = utilization.pipes(store, run_id)
    table = utilization.utilization(store, run_id)
    if frame.empty:
        return Section("alu_utilization", "ALU / pipe utilization", "Figure 12", None, "not collected",
                       missing=missing)
    top = frame.loc[frame["pct"].idxmax()]
    finding = f"busiest pipe: {top['pipe']} at {top['pct']:.0f}% in {top['layer']} {top['phase']}"
    return Section("alu_utilization", "ALU / pipe utilization", "Figure 12", fig.pipes(frame, sub), finding,
                   table.drop(columns=["run_id", "layer_id", "kind"], errors="ignore"))


def _caches(store, run_id, sub, missing) -> Section:
    frame = caches.by_level(store, run_id)
    if frame.empty:
        return Section("cache_hit_rates", "Cache hit rates", "Figures 13/14", None, "not collected", missing=missing)
    parts = []
    for level, rows in frame.groupby("level"):
        low = rows.loc[rows["hit_rate_pct"].idxmin()]
        parts.append(f"{level} {rows['hit_rate_pct'].min():.0f}-{rows['hit_rate_pct'].max():.0f}% "
                     f"(lowest {low['layer']} {low['phase']})")
    return Section("cache_hit_rates", "Cache hit rates", "Figures 13/14", fig.hit_rates(frame, sub),
                   "hit rates: " + "; ".join(parts),
                   caches.hit_rates(store, run_id).drop(columns=["run_id", "layer_id", "kind"], errors="ignore"))


def _traffic(store, run_id, sub, missing) -> Section:
    frame = traffic.by_level(store, run_id)
    if frame.empty:
        return Section("traffic", "Transactions and throughput per level", "Figures 15/16", None, "not collected",
                       missing=missing)
    by_level = frame.groupby("level")["transactions"].sum()
    finding = "transactions over the iteration: " + ", ".join(f"{lvl} {v:,.0f}" for lvl, v in by_level.items())
    return Section("traffic", "Transactions and throughput per level", "Figures 15/16", fig.traffic(frame, sub),
                   finding, frame.drop(columns=["layer_id"]))


def _levels(store, run_id, sub, missing) -> Section:
    frame = traffic.by_level(store, run_id)
    frame = frame[frame["pct_of_peak"].notna()] if not frame.empty else frame
    if frame.empty:
        return Section("level_utilization", "Utilization per memory level", "Figure 17", None, "not collected",
                       missing=missing)
    top = frame.loc[frame["pct_of_peak"].idxmax()]
    finding = f"closest to a peak: {top['level']} at {top['pct_of_peak']:.0f}% in {top['layer']} {top['phase']}"
    return Section("level_utilization", "Utilization per memory level", "Figure 17",
                   fig.level_utilization(frame, sub), finding)


def _roofline(store, run_id, sub, missing) -> Section:
    points, peaks = roofline.points(store, run_id), roofline.peaks(store, run_id)
    if points.empty:  # the model's roofline: compulsory bytes, attainable FLOP/s
        model = read_view(store, "layer_phase", run_id)
        model = model[(model["ops"] > 0) & model["attainable_gflops"].notna()]
        points = model.assign(level="model (compulsory bytes)", flops_per_s=model["attainable_gflops"] * 1e9)[
            ["layer_id", "layer", "phase", "level", "intensity", "flops_per_s"]]
        if points.empty:
            return Section("roofline", "Hierarchical roofline", "paper 000", None, "no counters and no device",
                           missing=missing)
        finding = (f"model only ({missing}): {(model['bound'] == 'memory').sum()} of {len(model)} layer phases "
                   "are memory-bound by compulsory bytes")
        return Section("roofline", "Roofline (model)", "paper 000", fig.roofline(points, {}, sub), finding)
    top = points.loc[points["flops_per_s"].idxmax()]
    peak = peaks.get("flops_per_s")
    finding = (f"fastest: {top['layer']} {top['phase']} at {top['flops_per_s'] / 1e12:.2f} TFLOP/s"
               + (f", {100 * top['flops_per_s'] / peak:.0f}% of the FP32 peak" if peak else ""))
    return Section("roofline", "Hierarchical roofline", "paper 000", fig.roofline(points, peaks, sub), finding,
                   points.drop(columns=["layer_id"]))


def _reconcile(store, run_id, missing) -> Section:
    frame = reconcile.reconcile(store, run_id)
    memory = reconcile.peak_memory(store, run_id)
    mem = (f"peak memory {memory['measured_peak_bytes'] / 2**30:.2f} GiB measured vs "
           f"{memory['predicted_peak_bytes'] / 2**30:.2f} GiB modelled" if memory["ratio"] else
           f"peak memory {memory['predicted_peak_bytes'] / 2**30:.2f} GiB modelled" if memory["predicted_peak_bytes"]
           else "no peak memory")
    if frame.empty or frame["flops_ratio"].isna().all():
        return Section("reconciliation", "Model vs measured", "paper 002", None, f"{mem}; no counters to reconcile",
                       missing=missing)
    worst = frame.loc[frame["flops_ratio"].idxmax()]
    finding = (f"{mem}; most FLOPs over the model: {worst['layer']} {worst['phase']} "
               f"({worst['flops_ratio']:.2f}x the model's ops)")
    if frame["dram_ratio"].notna().any():
        excess = frame.loc[frame["dram_ratio"].idxmax()]
        finding += f"; most excess DRAM traffic: {excess['layer']} {excess['phase']} ({excess['dram_ratio']:.2f}x)"
    return Section("reconciliation", "Model vs measured", "paper 002", None, finding,
                   frame.drop(columns=["run_id", "layer_id"]))


def _speedup_finding(frame: pd.DataFrame) -> str:
    layers = frame[frame["layer"] != "iteration"].dropna(subset=["speedup"])
    if layers.empty:
        return "no comparable times"
    top = layers.loc[layers["change_pct"].abs().idxmax()]
    noise = layers["noise"].fillna(False).astype(bool)
    total = frame[frame["layer"] == "iteration"]
    whole = f"; whole iteration {total['change_pct'].iloc[0]:+.1f}%" if not total.empty and pd.notna(
        total["change_pct"].iloc[0]) else ""
    return (f"largest change: {top['layer']} {top['phase']} {top['change_pct']:+.1f}%"
            f"{' (within noise)' if top['noise'] is True else ''}; {int(noise.sum())} of {len(layers)} layer phases "
            f"within the run-to-run spread{whole}")


def for_comparison(store: Store, run_a: int, run_b: int) -> list[Section]:
    both = speedup.comparison(store, run_a, run_b)
    frame = both[both["layer"] != "iteration"]
    sub = f"{_subtitle(store, run_b)} over {_subtitle(store, run_a)}"
    table = both[["layer", "phase", "a_ms", "b_ms", "spread_pct_a", "spread_pct_b", "speedup", "change_pct",
                  "noise"]]
    return [Section("speedup", f"Speedup of run {run_b} over run {run_a}", "Figure 8",
                    fig.speedup(frame, f"Speedup of run {run_b} over run {run_a}", sub), _speedup_finding(both),
                    table)]


def for_experiment(store: Store, experiment_id: int) -> tuple[str, dict, list[Section]]:
    info = experiment_dict(find_experiment(store, experiment_id))
    arms = experiments.runs(store, experiment_id)
    if arms.empty:
        raise StoreError(f"experiment e{experiment_id} ({info['status']}) has no completed run to report on")
    base = int(arms[arms["baseline"].astype(bool)]["run_id"].iloc[0])
    sub = f"{_subtitle(store, base)}; experiment e{experiment_id} {info['kind']}"
    about = {"experiment": f"e{experiment_id}", "kind": info["kind"], "status": info["status"],
             "network": info["network"], **{k: v for k, v in info["settings"].items()},
             "runs": ", ".join(f"{r.arm}: run {r.run_id}" for r in arms.itertuples())}
    heading = f"Experiment e{experiment_id}: {info['kind']} on {info['network']}"
    if info["kind"] == "batch":
        frame = experiments.scaling(store, experiment_id)
        wide = frame.pivot_table(index=["layer_id", "layer", "phase"], columns="batch", values="ms").reset_index()
        per_image = frame.groupby("batch")["ms_per_image"].sum()
        finding = "time per image over the iteration: " + ", ".join(
            f"batch {b}: {v * 1000:.3g} us" for b, v in per_image.items())
        return heading, about, [Section("batch_runtime", "Runtime per layer per batch size", "Figures 6/7",
                                        fig.batch_runtime(frame, sub), finding, wide.drop(columns=["layer_id"]))]
    frame = experiments.speedups(store, experiment_id)
    sections = []
    if info["kind"] == "fusion":
        pairs = experiments.fused_pairs(store, experiment_id)
        pairs = pairs.assign(change_pct=100 * (pairs["speedup"] - 1)) if not pairs.empty else pairs
        sections.append(Section("fusion", "Fusion speedup per conv/fc + ReLU pair", "paper 003 section 4 (4.0 %)",
                                fig.speedup(pairs, "Fusion: separate ReLU -> fused kernel", sub),
                                _speedup_finding(pd.concat([pairs, frame[frame["layer"] == "iteration"]])),
                                pairs.drop(columns=["layer_id"], errors="ignore")))
    title = {"l1-bypass": "L1 bypass (-dlcm=cg) speedup per layer", "variants": "Kernel variants against global",
             "fusion": "Fusion speedup per layer"}[info["kind"]]
    paper = {"l1-bypass": "paper 003 section 4 (6.2 %)", "variants": "memory placement",
             "fusion": "paper 003 section 4"}[info["kind"]]
    columns = ["comparison", "arm", "layer", "phase", "a_ms", "b_ms", "spread_pct_a", "spread_pct_b", "speedup",
               "change_pct", "noise", "l1_hit_rate_change", "l2_hit_rate_change", "first_reason_a", "first_reason_b"]
    columns = [c for c in columns if c in frame.columns]
    sections.append(Section(info["kind"].replace("-", "_"), title, paper, fig.speedup(frame, title, sub),
                            _speedup_finding(frame), frame[columns] if not frame.empty else None))
    return heading, about, sections
