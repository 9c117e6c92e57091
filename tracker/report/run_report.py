"""A run's report: the header in words and the sections (figure, finding, table) for one run,
computed from tracker/analysis and drawn by tracker/figures.

It is the table ``RUN_SECTIONS``: each section's key, title and paper figure, written once, and
the builder that fills it from a ``ReportedRun``: the run's settings, read once per report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import pandas as pd

from tracker import units
from tracker.analysis import (
    algorithms,
    caches,
    fp,
    idle,
    reconcile,
    roofline,
    run_row,
    runtime,
    stalls,
    traffic,
    utilization,
)
from tracker.figures import bars
from tracker.figures.roofline import LEFT_OUT
from tracker.figures.roofline import roofline as roofline_figure
from tracker.implementations import of_run
from tracker.profilers import iterations_profiled, unfinished
from tracker.report.document import Report, Section
from tracker.stats import best_of, tie
from tracker.store import Store, launch_count
from tracker.store.queries import idle_line


@dataclass(frozen=True)
class ReportedRun:
    """One run as the sections of its report see it: its settings, read once, and the analyses two
    sections each use, computed once on first use (run A of a comparison needs neither)."""

    store: Store
    id: int
    row: pd.Series  # as the store decodes it (run_row): a missing value None, JSON columns dicts

    @classmethod
    def read(cls, store: Store, run_id: int) -> ReportedRun:
        return cls(store, run_id, run_row(store, run_id))

    @property
    def sub(self) -> str:
        """'alexnet, batch 128, NVIDIA H100 80GB HBM3, ncu (run 2)': under every figure's title."""
        run = self.row
        return (
            f"{run['network']}, batch {run['batch']}, {run['device_name'] or 'no device'}, {run['backend']} "
            f"(run {self.id})"
        )

    @property
    def why(self) -> str:  # what a section that needs counters says when the run has none
        backend = self.row["backend"]
        if backend in ("model", "events"):
            return f"no counters in run {self.id} (backend {backend}); profile with --backend ncu on a GPU"
        return f"run {self.id} (backend {backend}) did not collect these counters"

    @cached_property
    def unfinished(self) -> str | None:
        """What the run holds if it did not complete, in one sentence (tracker.profilers.unfinished)."""
        return unfinished(self.row, launch_count(self.store, self.id))

    @cached_property
    def times(self) -> pd.DataFrame:  # time per layer phase: its section, and the layer the stall finding names
        return runtime.runtime(self.store, self.id)

    @cached_property
    def levels(self) -> pd.DataFrame:  # traffic per memory level: the traffic and level utilization sections
        return traffic.by_level(self.store, self.id)


class Body(NamedTuple):
    """What a section's builder computes; the table names it (key, title, paper figure)."""

    figure: object | None  # matplotlib Figure
    finding: str
    table: pd.DataFrame | None = None
    missing: str | None = None  # why there is no figure


def _empty(why: str) -> Body:
    """A section with nothing to show: the page leaves it out and says why in one line."""
    return Body(None, "", None, why)


class Spec(NamedTuple):
    """One section of a run's report."""

    key: str  # file stem and anchor
    title: str
    paper: str  # which paper figure it redraws
    build: Callable[[ReportedRun], Body | None]  # None: the run did not collect the counters it needs
    shown: Callable[[pd.Series], bool] = lambda run: True  # whether a run of this kind has the section

    def section(self, run: ReportedRun) -> Section:
        body = self.build(run)
        if body is None:  # the page folds these into one line naming the command that fills them
            return Section(self.key, self.title, self.paper, None, "not collected", run.why, needs_counters=True)
        return Section(self.key, self.title, self.paper, *body)


def _variants(run: pd.Series) -> str:
    chosen = run["variants"] or {}
    return ", ".join(f"{op} {v}" for op, v in chosen.items()) or "the default of each op"


def _tiles(run: pd.Series) -> str:
    tiles = run.get("tiles")
    if tiles is None:
        return "not recorded"
    return ", ".join(f"{key} {tile}" for key, tile in tiles.items()) or "the default of each launch"


def _tuned_variants(run: pd.Series) -> str:
    """Where `tracker tune` chose another variant than the plan's (nothing said where it did not)."""
    chosen = run.get("tuned_variants") or {}
    return f"; tuned variants: {', '.join(f'{key} {v}' for key, v in chosen.items())}" if chosen else ""


def describe(run: pd.Series, unfinished: str | None = None) -> str:
    """The run in one paragraph: what ran, on what, measured how, when; ``unfinished``: what a run
    that did not complete holds (``ReportedRun.unfinished``), said after it."""
    after = f" {unfinished[0].upper()}{unfinished[1:]}." if unfinished else ""
    if run["backend"] == "model":
        where = (
            f"modelled for {run['device_name']}: the analytic model's predictions, no GPU ran it"
            if run["device_name"]
            else "modelled without a device: FLOPs and bytes only"
        )
        return (
            f"{run['network']} at batch {run['batch']}, {where}. Run {run.name}, {run['status']}, {_when(run)}.{after}"
        )
    l1 = "L1 bypassed (loads compiled .cg)" if run["l1_bypass"] else "L1 cached"
    if run.get("loaders") == "staged" and not run["l1_bypass"]:
        l1 += ", operands staged through registers as the L1-bypass build's (--staged)"
    repeats = f"{run['repeat']} measured iteration{'s' if run['repeat'] != 1 else ''}"
    ran_by = of_run(run).ran_by(run)
    kernels = (
        f"run by {ran_by}"
        if ran_by
        else f"kernel variants: {_variants(run)}{_tuned_variants(run)}; GEMM tiles: {_tiles(run)}; {l1}"
    )
    return (
        f"{run['network']} at batch {run['batch']} on {_device(run)}, {_how(run)}; {kernels}; {repeats}. "
        f"Run {run.name}, {run['status']}, {_when(run)}.{after}"
    )


def _device(run: pd.Series) -> str:
    """'NVIDIA H100 80GB HBM3 (compute capability 9.0, 132 SMs)'; a run that ended before it met
    its GPU has none recorded."""
    if not run["device_name"]:
        return "a GPU not recorded (the run ended before pass 1 reached it)"
    known = [
        f"compute capability {run['compute_capability']}" if pd.notna(run["compute_capability"]) else "",
        f"{int(run['sm_count'])} SMs" if pd.notna(run["sm_count"]) else "",
    ]
    return run["device_name"] + (f" ({', '.join(k for k in known if k)})" if any(known) else "")


COLLECTOR_NAMES = {"ncu": "Nsight Compute", "nvprof": "nvprof"}  # a run's backend, as its report names it


def _how(run: pd.Series) -> str:
    """How it was measured: the collector and the iterations it profiled (every one is timed), or
    the events alone."""
    iterations = run.get("counter_iterations")
    if run["backend"] in COLLECTOR_NAMES and iterations is not None:
        how = _collector_settings(run)
        version = f" {run['collector_version']}" if run.get("collector_version") else ""
        return (
            f"measured with {COLLECTOR_NAMES[run['backend']]}{version}{f' ({how})' if how else ''} on {_profiled(run)}"
        )
    if run["backend"] in ("ncu", "nvprof"):
        return f"profiled with {run['backend']}, whose pass 2 stored no counters"
    return f"timed with {run['backend']}"


def _collector_settings(run: pd.Series) -> str | None:
    """'replay mode kernel, cache control all, clock control base': how pass 2's collector ran."""
    settings = run.get("collector_settings") or {}
    return ", ".join(f"{key.replace('_', ' ')} {value}" for key, value in settings.items()) or None


def _profiled(run: pd.Series) -> str:
    return iterations_profiled(int(run["counter_iterations"]), int(run["repeat"]))


def _when(run: pd.Series) -> str:
    started, finished = pd.to_datetime(run["started_at"]), pd.to_datetime(run["finished_at"])
    if pd.isna(started):
        return "time not recorded"
    took = (
        f", profiled in {units.seconds((finished - started).total_seconds())} of wall time"
        if pd.notna(finished)
        else ""
    )
    return f"started {started:%Y-%m-%d %H:%M} UTC{took}"


ABOUT = {
    "network": "network",
    "batch": "batch",
    "device_name": "GPU",
    "compute_capability": "compute capability",
    "backend": "backend",
    "backend_reason": "why this backend",
    "variants": "kernel variants",
    "l1_bypass": "L1 bypass",
    "loaders": "GEMM loaders",
    "repeat": "measured iterations",
    "counter_iterations": "iterations with counters",
    "collector_version": "collector version",
    "driver_version": "driver",
    "cuda_version": "CUDA",
    "status": "status",
    "started_at": "started",
    "command_line": "command",
}


def _about(run: pd.Series) -> dict:
    about = {"run": run.name, **{label: run.get(key) for key, label in ABOUT.items()}}
    ran_by = of_run(run).ran_by(run)
    if ran_by:
        about["run by"] = ran_by
    about["kernel variants"] = _variants(run) + _tuned_variants(run)
    about["GEMM tiles"] = _tiles(run)
    about["L1 bypass"] = bool(run["l1_bypass"])
    about["collector settings"] = _collector_settings(run)
    about["started"] = f"{pd.to_datetime(run['started_at']):%Y-%m-%d %H:%M:%S} UTC" if run["started_at"] else None
    return about


def for_run(run: ReportedRun) -> Report:
    row = run.row
    sections = [spec.section(run) for spec in RUN_SECTIONS if spec.shown(row)]
    return Report(
        f"Run {run.id}: {row['network']}, batch {row['batch']}, {row['device_name'] or 'no device'}",
        describe(row, run.unfinished),
        _about(row),
        sections,
        _fill_command(row),
        run.unfinished,
    )


def _fill_command(row: pd.Series) -> str:
    """The command that gets the same workload's counters."""
    return of_run(row).fill_command(row, _network_flags(row))


def _network_flags(row: pd.Series) -> str:
    """The network options a run was built with that differ from the network's defaults, as flags."""
    from tracker.nets import NETWORKS, build

    options = row.get("network_options") or {}
    if row["network"] not in NETWORKS or not options:
        return ""
    defaults = build(row["network"]).options
    return "".join(
        f" --{name.replace('_', '-')} {value}" for name, value in options.items() if defaults.get(name) != value
    )


def _top(frame: pd.DataFrame, column: str) -> pd.Series:
    return frame.loc[frame[column].idxmax()]


def _leaders(frame: pd.DataFrame, column: str) -> tuple[pd.Series, str]:
    """The row with the highest ``column``, and the layer phases that share it to the digits shown,
    named as a tie where there are several ('conv2 fwd = conv2 bwd_data (tie)')."""
    known = frame[frame[column].notna()]
    rows = known.iloc[best_of(known[column].tolist(), lowest=False)]
    return rows.iloc[0], tie([f"{r.layer} {r.phase}" for r in rows.itertuples()])


def _predicted(run: pd.Series) -> str:
    """Why a run's figures are the model's: it is a model run, or its launches were never timed."""
    return "predicted by the model" + ("" if run["backend"] == "model" else ": no launch times were recorded")


def _runtime(run: ReportedRun) -> Body:
    frame = run.times
    known = frame[frame["ms"].notna()]
    if known.empty:
        return _empty(
            (
                "a model run without a device has no times"
                if run.row["backend"] == "model"
                else "no launch times were recorded"
            )
            + "; profile with --device NAME for the model's, or on a GPU"
        )
    total = runtime.iteration(run.store, run.id)
    top, names = _leaders(known, "ms")
    measured = (known["source"] == "measured").all()
    source = "median kernel time" if measured else _predicted(run.row)
    finding = (
        f"{names} takes the most time: {units.milliseconds(top['ms'])}, "
        f"{units.percent(100 * top['ms'] / total['ms'])} of the {units.milliseconds(total['ms'])} iteration"
        f"{'' if measured else f' ({source})'}"
    )
    figure = bars.by_phase(frame[frame["ms"] > 0], "ms", f"Time per layer ({source})", run.sub, "time", log=True)
    return Body(figure, finding, frame[["layer", "phase", "ms", "spread_pct", "predicted_ms", "launches", "source"]])


def _roofline(run: ReportedRun) -> Body:
    points, basis = roofline.chart(run.store, run.id)
    if points.empty:
        return _empty(
            "no times and no counters to place; profile with --device NAME for the model's roofline, or on a GPU"
        )
    roofs = roofline.roofs(run.store, run.id)
    title = {
        "counters": "Hierarchical roofline (ncu: FLOPs and bytes per level)",
        "time": "Roofline: the model's FLOPs and compulsory bytes over measured time",
        "predicted": f"Roofline {_predicted(run.row)} (compulsory bytes)",
    }[basis]
    primary = points[points["level"].isin(("DRAM", "compulsory"))]
    primary = primary if not primary.empty else points
    top, names = _leaders(primary, "flops_per_s")
    finding = f"fastest: {names} at {units.si(top['flops_per_s'], 'FLOP/s')}"
    if roofs is not None:
        finding += f", {units.percent(100 * top['flops_per_s'] / roofs.flops_per_s)} of the FP32 roof"
        if "DRAM" in roofs.bandwidth:
            below = (primary["intensity"] < roofs.ridge("DRAM")).sum()
            finding += (
                f"; {below} of {len(primary)} layer phases lie left of the DRAM ridge "
                f"({units.number('intensity', roofs.ridge('DRAM'))}): memory-bound"
            )
    left_out = points.attrs.get("left_out", [])
    if left_out:
        finding += f"; {units.count_of(len(left_out), 'layer phase')} not shown ({LEFT_OUT})"
    return Body(
        roofline_figure(points, roofs, f"{title}\n{run.sub}", basis), finding, points.drop(columns=["layer_id"])
    )


EFFICIENCY_PANELS = [("ms", "time"), ("peak_pct", "of the FP32 peak"), ("share_pct", "of the step")]


def efficiency_finding(frame: pd.DataFrame, who: str) -> str:
    """The layer phase that takes the largest share of the step, and how close to the peak it runs."""
    top = _top(frame, "share_pct")
    peak = f" at {units.percent(top['peak_pct'])} of the FP32 peak" if pd.notna(top["peak_pct"]) else ""
    return f"{who}{top['layer']} {top['phase']} takes {units.percent(top['share_pct'])} of the step{peak}"


def _efficiency(run: ReportedRun) -> Body:
    frame = roofline.efficiency(run.store, run.id)
    if frame.empty:
        return _empty("no times; profile with --device NAME for the model's, or on a GPU")
    figure = bars.grouped(
        frame.assign(run=f"run {run.id}"),
        "ms",
        "run",
        "Time, FLOP/s against the FP32 peak, and share of the step, per layer phase",
        run.sub,
        "time",
        panels=EFFICIENCY_PANELS,
    )
    return Body(figure, efficiency_finding(frame, ""), frame.drop(columns=["layer_id"]))


def _memory(run: ReportedRun) -> Body:
    """The model's peak as the run recorded it (reconcile.peak_memory, as show and the notebooks
    print it), and its parts where today's model still adds up to it."""
    from tracker.gpu.network import algorithms
    from tracker.gpu.workload import is_module_spec
    from tracker.model import memory
    from tracker.nets import build

    row, peak = run.row, reconcile.peak_memory(run.store, run.id)
    if is_module_spec(row["network"]):  # a user's PyTorch model: the parts need the module, not stored
        return Body(
            None,
            peak.line(),
            missing=f"the parts of the peak need tracker's own network, and {row['network']} is a PyTorch model",
        )
    if peak.predicted_bytes is None:
        return Body(None, peak.line(), missing=f"run {run.id} stores no prediction of its peak")
    net, batch = build(row["network"], **(row["network_options"] or {})), int(row["batch"])
    model = memory(net, batch, int(row["dtype_bits"]), algorithms(net, row.get("plan"), batch))  # as profiled
    if model.peak_bytes != peak.predicted_bytes:  # a run is never rewritten; its prediction stays as recorded
        return Body(
            None,
            peak.line(),
            missing=f"the parts of the peak are left out: the model has changed since run {run.id} was "
            f"recorded (it now predicts {units.nbytes(model.peak_bytes)}; profile again for the parts)",
        )
    parts = pd.DataFrame(
        [
            {"part": k.removesuffix("_bytes").replace("_", " "), "bytes": v}
            for k, v in model.to_dict().items()
            if k != "peak_bytes"
        ]
    )
    figure = bars.memory(parts, model.peak_bytes, peak.measured_bytes, "GPU memory", run.sub)
    return Body(figure, peak.line(), parts)


def _fp(run: ReportedRun) -> Body | None:
    frame = fp.by_kind(run.store, run.id)
    if frame.empty:
        return None
    totals = frame.groupby("instruction")["instructions"].sum()
    per_layer = frame.groupby(["layer", "phase"], as_index=False)["instructions"].sum()
    most = _top(per_layer, "instructions")
    finding = (
        f"{totals.idxmax()} is {units.percent(100 * totals.max() / totals.sum())} of FP32 instructions; "
        f"most in {most['layer']} {most['phase']}"
    )
    figure = bars.stacked(frame, "instruction", "instructions", "FP32 instructions", run.sub, "thread instructions")
    return Body(
        figure,
        finding,
        fp.fp_instructions(run.store, run.id)[
            ["layer", "phase", "fadd", "fmul", "ffma", "flops", "model_ops", "flops_per_model_op"]
        ],
    )


def _stalls(run: ReportedRun) -> Body | None:
    frame = stalls.by_category(run.store, run.id)
    if frame.empty:
        return None
    verdict = stalls.bound(run.store, run.id)
    ranked = verdict.merge(run.times[["layer_id", "phase", "ms"]], on=["layer_id", "phase"]).dropna(
        subset=["first_reason"]
    )
    ranked = ranked.sort_values("ms", ascending=False) if ranked["ms"].notna().any() else ranked
    top = ranked.iloc[0]
    finding = (
        f"{top['layer']} {top['phase']}: top stalls {top['first_reason']}, {top['second_reason']} "
        f"-> {top['bound']}-bound"
    )
    figure = bars.stacked(
        frame.assign(share_pct=100 * frame["share"]),
        "category",
        "share_pct",
        "Stall breakdown (paper 003's categories)",
        run.sub,
        "share of stall samples",
    )
    table = verdict[["layer", "phase", "first_reason", "first_share", "second_reason", "bound", "why"]]
    return Body(
        figure,
        finding,
        table.assign(first_share=100 * table["first_share"]).rename(columns={"first_share": "first_share_pct"}),
    )


def _pipes(run: ReportedRun) -> Body | None:
    frame = utilization.pipes(run.store, run.id)
    if frame.empty:
        return None
    top = _top(frame, "pct")
    finding = f"busiest pipe: {top['pipe']} at {units.percent(top['pct'])} in {top['layer']} {top['phase']}"
    table = utilization.utilization(run.store, run.id).drop(columns=["run_id", "layer_id", "kind"], errors="ignore")
    return Body(bars.grouped(frame, "pct", "pipe", "ALU / pipe utilization", run.sub, "% of peak"), finding, table)


def _caches(run: ReportedRun) -> Body | None:
    frame = caches.by_level(run.store, run.id)
    if frame.empty:
        return None
    parts = []
    for level, rows in frame.groupby("level"):
        low = rows.loc[rows["hit_rate_pct"].idxmin()]
        parts.append(
            f"{level} {units.percent(rows['hit_rate_pct'].min())} to "
            f"{units.percent(rows['hit_rate_pct'].max())} (lowest {low['layer']} {low['phase']})"
        )
    over = frame[frame["hit_rate_pct"] > 100]
    if not over.empty:  # ncu's rates are not clamped: tracker/metrics.py says why, as `tracker metrics` does
        parts.append(
            f"over 100 % in {', '.join(over['layer'] + ' ' + over['phase'])}: ncu's figures, not clamped, "
            "where hits and lookups were counted in different replay passes (tracker metrics l2_hit_rate)"
        )
    table = caches.hit_rates(run.store, run.id).drop(columns=["run_id", "layer_id", "kind"], errors="ignore")
    return Body(
        bars.grouped(frame, "hit_rate_pct", "level", "Cache hit rates", run.sub, "hit rate"),
        "hit rates: " + "; ".join(parts),
        table,
    )


def _traffic(run: ReportedRun) -> Body | None:
    frame = run.levels
    if frame.empty:
        return None
    by_level = frame.groupby("level")["transactions"].sum()
    finding = "transactions over the iteration: " + ", ".join(f"{lvl} {units.count(v)}" for lvl, v in by_level.items())
    panels = [
        (c, label)
        for c, label in (("transactions", "sectors / wavefronts"), ("bytes_per_s", "throughput"))
        if frame[c].notna().any()
    ]
    figure = bars.grouped(
        frame,
        panels[0][0],
        "level",
        "Transactions and throughput per memory level",
        run.sub,
        panels[0][1],
        log=True,
        panels=panels,
    )
    return Body(figure, finding, frame.drop(columns=["layer_id"]))


def _levels(run: ReportedRun) -> Body | None:
    frame = run.levels
    frame = frame[frame["pct_of_peak"].notna()] if not frame.empty else frame
    if frame.empty:
        return None
    top = _top(frame, "pct_of_peak")
    finding = (
        f"closest to a peak: {top['level']} at {units.percent(top['pct_of_peak'])} in {top['layer']} {top['phase']}"
    )
    return Body(
        bars.grouped(frame, "pct_of_peak", "level", "Utilization per memory level", run.sub, "% of peak"), finding
    )


def _reconcile(run: ReportedRun) -> Body | None:
    frame = reconcile.reconcile(run.store, run.id)
    if frame.empty or frame["flops_ratio"].isna().all():
        return None
    worst = _top(frame, "flops_ratio")
    finding = (
        f"most FLOPs over the model: {worst['layer']} {worst['phase']} "
        f"({units.ratio(worst['flops_ratio'])} the model's ops)"
    )
    if frame["dram_ratio"].notna().any():
        excess = _top(frame, "dram_ratio")
        finding += (
            f"; most DRAM traffic over the compulsory bytes: {excess['layer']} {excess['phase']} "
            f"({units.ratio(excess['dram_ratio'])})"
        )
    return Body(None, finding, frame.drop(columns=["run_id", "layer_id"]))


def _idle(run: ReportedRun) -> Body:
    frame = idle.per_phase(run.store, run.id)
    whole = idle_line(run.store, run.id)
    if frame.empty or whole is None:
        return _empty(idle.NO_STARTS)
    top, names = _leaders(frame, "idle_ms")
    finding = (
        f"the GPU ran nothing for {whole}; the longest wait comes before {names}: {units.milliseconds(top['idle_ms'])}"
    )
    figure = bars.by_phase(frame, "idle_ms", "GPU idle before each layer phase's launches", run.sub, "time")
    return Body(figure, finding, frame[["layer", "phase", "idle_ms", "busy_ms"]])


def _not_ours(row: pd.Series) -> bool:
    """Whether someone else's kernels ran it (a library's, another tool's): their names say the algorithm."""
    return of_run(row).ran_by(row) is not None


def _algorithms(run: ReportedRun) -> Body:
    frame = algorithms.per_phase(run.store, run.id)
    if frame.empty:
        return _empty("no launch names an algorithm (the model backend runs no kernel)")
    counts = frame.groupby("algorithm")["phase"].count().sort_values(ascending=False)
    conv = frame[frame["kind"] == "conv"]
    finding = (
        "; ".join(f"{r.layer} {r.phase}: {r.algorithm}" for r in conv.itertuples())
        if not conv.empty
        else ", ".join(f"{name} in {n} layer phases" for name, n in counts.items())
    )
    return Body(None, finding, frame.drop(columns=["layer_id"]))


RUN_SECTIONS = (  # in the page's order
    Spec("algorithms", "Algorithm per layer phase (cuDNN, cuBLAS)", "paper 004", _algorithms, _not_ours),
    Spec("runtime", "Time per layer", "Figures 6/7", _runtime),
    Spec("idle", "GPU idle between launches", "HTA idle time", _idle, lambda run: run["backend"] != "model"),
    Spec("roofline", "Roofline", "paper 000", _roofline),
    Spec("efficiency", "Time, FLOP/s against the FP32 peak, and share of the step", "paper 001", _efficiency),
    Spec("memory", "GPU memory", "paper 002", _memory),
    Spec("fp_instructions", "FP32 instructions", "Figure 9", _fp),
    Spec("stalls", "Stall breakdown and what bounds each layer", "Figures 10/11", _stalls),
    Spec("alu_utilization", "ALU / pipe utilization", "Figure 12", _pipes),
    Spec("cache_hit_rates", "Cache hit rates", "Figures 13/14", _caches),
    Spec("traffic", "Transactions and throughput per level", "Figures 15/16", _traffic),
    Spec("level_utilization", "Utilization per memory level", "Figure 17", _levels),
    Spec("reconciliation", "Model against measured", "paper 002", _reconcile),
)
