"""What each report holds: the header in words and the sections (figure, finding, table) for a run,
a comparison and an experiment, computed from tracker/analysis and drawn by tracker/figures.

A run's report is the table ``RUN_SECTIONS``: each section's key, title and paper figure, written
once, and the builder that fills it from a ``Run``: the run's settings, read once per report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import pandas as pd

from tracker import units
from tracker.analysis import algorithms, caches, experiments, fp, reconcile, roofline, run_row, runtime, speedup
from tracker.analysis import stalls
from tracker.analysis import traffic, utilization
from tracker.errors import StoreError
from tracker.figures import bars
from tracker.figures.roofline import LEFT_OUT
from tracker.figures.roofline import roofline as roofline_figure
from tracker.profilers import iterations_profiled, unfinished
from tracker.stats import best_of, tie
from tracker.report import Report, Section
from tracker.store import Store, experiment_dict, find_experiment, launch_count


@dataclass(frozen=True)
class Run:
    """One run as the sections of its report see it: its settings, read once, and the analyses two
    sections each use, computed once on first use (run A of a comparison needs neither)."""

    store: Store
    id: int
    row: pd.Series  # as the store decodes it (run_row): a missing value None, JSON columns dicts

    @classmethod
    def read(cls, store: Store, run_id: int) -> Run:
        return cls(store, run_id, run_row(store, run_id))

    @property
    def sub(self) -> str:
        """'alexnet, batch 128, NVIDIA H100 80GB HBM3, ncu (run 2)': under every figure's title."""
        run = self.row
        return (f"{run['network']}, batch {run['batch']}, {run['device_name'] or 'no device'}, {run['backend']} "
                f"(run {self.id})")

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
    build: Callable[[Run], Body | None]  # None: the run did not collect the counters it needs
    shown: Callable[[pd.Series], bool] = lambda run: True  # whether a run of this kind has the section

    def section(self, run: Run) -> Section:
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
    that did not complete holds (``Run.unfinished``), said after it."""
    after = f" {unfinished[0].upper()}{unfinished[1:]}." if unfinished else ""
    if run["backend"] == "model":
        where = (f"modelled for {run['device_name']}: the analytic model's predictions, no GPU ran it"
                 if run["device_name"] else "modelled without a device: FLOPs and bytes only")
        return (f"{run['network']} at batch {run['batch']}, {where}. Run {run.name}, {run['status']}, "
                f"{_when(run)}.{after}")
    l1 = "L1 bypassed (loads compiled .cg)" if run["l1_bypass"] else "L1 cached"
    if run.get("loaders") == "staged" and not run["l1_bypass"]:
        l1 += ", operands staged through registers as the L1-bypass build's (--staged)"
    repeats = f"{run['repeat']} measured iteration{'s' if run['repeat'] != 1 else ''}"
    kernels = (f"run by {_library(run)}" if _is_library(run) else
               f"kernel variants: {_variants(run)}{_tuned_variants(run)}; GEMM tiles: {_tiles(run)}; {l1}")
    return (f"{run['network']} at batch {run['batch']} on {_device(run)}, {_how(run)}; {kernels}; {repeats}. "
            f"Run {run.name}, {run['status']}, {_when(run)}.{after}")


def _device(run: pd.Series) -> str:
    """'NVIDIA H100 80GB HBM3 (compute capability 9.0, 132 SMs)'; a run that ended before it met
    its GPU has none recorded."""
    if not run["device_name"]:
        return "a GPU not recorded (the run ended before pass 1 reached it)"
    known = [f"compute capability {run['compute_capability']}" if pd.notna(run["compute_capability"]) else "",
             f"{int(run['sm_count'])} SMs" if pd.notna(run["sm_count"]) else ""]
    return run["device_name"] + (f" ({', '.join(k for k in known if k)})" if any(known) else "")


COLLECTOR_NAMES = {"ncu": "Nsight Compute", "nvprof": "nvprof"}  # a run's backend, as its report names it


def _how(run: pd.Series) -> str:
    """How it was measured: the collector and the iterations it profiled (every one is timed), or
    the events alone."""
    iterations = run.get("counter_iterations")
    if run["backend"] in COLLECTOR_NAMES and iterations is not None:
        how = _collector_settings(run)
        version = f" {run['collector_version']}" if run.get("collector_version") else ""
        return f"measured with {COLLECTOR_NAMES[run['backend']]}{version}{f' ({how})' if how else ''} on {_profiled(run)}"
    if run["backend"] in ("ncu", "nvprof"):
        return f"profiled with {run['backend']}, whose pass 2 stored no counters"
    return f"timed with {run['backend']}"


def _collector_settings(run: pd.Series) -> str | None:
    """'replay mode kernel, cache control all, clock control base': how pass 2's collector ran."""
    settings = run.get("collector_settings") or {}
    return ", ".join(f"{key.replace('_', ' ')} {value}" for key, value in settings.items()) or None


def _profiled(run: pd.Series) -> str:
    return iterations_profiled(int(run["counter_iterations"]), int(run["repeat"]))


def _is_library(run: pd.Series) -> bool:
    return run.get("implementation") not in (None, "ours")


def _library(run: pd.Series) -> str:
    """'PyTorch 2.9.1 (CUDA 12.8, cuDNN 91002, cuBLAS 12.8.4.1; TF32 off, cuDNN benchmark off)'."""
    lib = run.get("library") or {}
    if not lib.get("torch"):  # the model backend: the same network predicted, nothing ran
        return "PyTorch (as the model predicts the same network)"
    on = lambda key: "on" if lib.get(key) else "off"  # noqa: E731
    return (f"PyTorch {lib.get('torch')} (CUDA {lib.get('cuda')}, cuDNN {lib.get('cudnn')}, cuBLAS {lib.get('cublas')}; "
            f"TF32 {on('tf32')}, cuDNN benchmark {on('cudnn_benchmark')})")


def _when(run: pd.Series) -> str:
    started, finished = pd.to_datetime(run["started_at"]), pd.to_datetime(run["finished_at"])
    if pd.isna(started):
        return "time not recorded"
    took = (f", profiled in {units.seconds((finished - started).total_seconds())} of wall time"
            if pd.notna(finished) else "")
    return f"started {started:%Y-%m-%d %H:%M} UTC{took}"


ABOUT = {"network": "network", "batch": "batch", "device_name": "GPU", "compute_capability": "compute capability",
         "backend": "backend", "backend_reason": "why this backend", "variants": "kernel variants",
         "l1_bypass": "L1 bypass", "loaders": "GEMM loaders", "repeat": "measured iterations",
         "counter_iterations": "iterations with counters", "collector_version": "collector version",
         "driver_version": "driver", "cuda_version": "CUDA",
         "status": "status", "started_at": "started", "command_line": "command"}


def _about(run: pd.Series) -> dict:
    about = {"run": run.name, **{label: run.get(key) for key, label in ABOUT.items()}}
    if _is_library(run):
        about["run by"] = _library(run)
    about["kernel variants"] = _variants(run) + _tuned_variants(run)
    about["GEMM tiles"] = _tiles(run)
    about["L1 bypass"] = bool(run["l1_bypass"])
    about["collector settings"] = _collector_settings(run)
    about["started"] = f"{pd.to_datetime(run['started_at']):%Y-%m-%d %H:%M:%S} UTC" if run["started_at"] else None
    return about


def for_run(run: Run) -> Report:
    row = run.row
    sections = [spec.section(run) for spec in RUN_SECTIONS if spec.shown(row)]
    return Report(f"Run {run.id}: {row['network']}, batch {row['batch']}, {row['device_name'] or 'no device'}",
                  describe(row, run.unfinished), _about(row), sections,
                  _fill_command(row), run.unfinished)


def _fill_command(row: pd.Series) -> str:
    """The command that profiles the same workload with counters."""
    from tracker.gpu.workload import is_module_spec

    if is_module_spec(row["network"]):
        return f"tracker profile --torch {row['network']} --backend ncu"
    impl = f" --impl {row['implementation']}" if _is_library(row) else ""
    return f"tracker profile {row['network']} --batch {row['batch']}{_network_flags(row)} --backend ncu{impl}"


def _network_flags(row: pd.Series) -> str:
    """The network options a run was built with that differ from the network's defaults, as flags."""
    from tracker.nets import NETWORKS, build

    options = row.get("network_options") or {}
    if row["network"] not in NETWORKS or not options:
        return ""
    defaults = build(row["network"]).options
    return "".join(f" --{name.replace('_', '-')} {value}" for name, value in options.items()
                   if defaults.get(name) != value)


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


def _runtime(run: Run) -> Body:
    frame = run.times
    known = frame[frame["ms"].notna()]
    if known.empty:
        return _empty(("a model run without a device has no times" if run.row["backend"] == "model"
                       else "no launch times were recorded") + "; profile with --device NAME for the model's, or on a GPU")
    total = runtime.iteration(run.store, run.id)
    top, names = _leaders(known, "ms")
    measured = (known["source"] == "measured").all()
    source = "median kernel time" if measured else _predicted(run.row)
    finding = (f"{names} takes the most time: {units.milliseconds(top['ms'])}, "
               f"{units.percent(100 * top['ms'] / total['ms'])} of the {units.milliseconds(total['ms'])} iteration"
               f"{'' if measured else f' ({source})'}")
    figure = bars.by_phase(frame[frame["ms"] > 0], "ms", f"Time per layer ({source})", run.sub, "time", log=True)
    return Body(figure, finding, frame[["layer", "phase", "ms", "spread_pct", "predicted_ms", "launches", "source"]])


def _roofline(run: Run) -> Body:
    points, basis = roofline.chart(run.store, run.id)
    if points.empty:
        return _empty("no times and no counters to place; profile with --device NAME for the model's roofline, "
                      "or on a GPU")
    roofs = roofline.roofs(run.store, run.id)
    title = {"counters": "Hierarchical roofline (ncu: FLOPs and bytes per level)",
             "time": "Roofline: the model's FLOPs and compulsory bytes over measured time",
             "predicted": f"Roofline {_predicted(run.row)} (compulsory bytes)"}[basis]
    primary = points[points["level"].isin(("DRAM", "compulsory"))]
    primary = primary if not primary.empty else points
    top, names = _leaders(primary, "flops_per_s")
    finding = f"fastest: {names} at {units.si(top['flops_per_s'], 'FLOP/s')}"
    if roofs is not None:
        finding += f", {units.percent(100 * top['flops_per_s'] / roofs.flops_per_s)} of the FP32 roof"
        if "DRAM" in roofs.bandwidth:
            below = (primary["intensity"] < roofs.ridge("DRAM")).sum()
            finding += (f"; {below} of {len(primary)} layer phases lie left of the DRAM ridge "
                        f"({units.number('intensity', roofs.ridge('DRAM'))}): memory-bound")
    left_out = points.attrs.get("left_out", [])
    if left_out:
        finding += f"; {units.count_of(len(left_out), 'layer phase')} not shown ({LEFT_OUT})"
    return Body(roofline_figure(points, roofs, f"{title}\n{run.sub}", basis), finding,
                points.drop(columns=["layer_id"]))


EFFICIENCY_PANELS = [("ms", "time"), ("peak_pct", "of the FP32 peak"), ("share_pct", "of the step")]


def _efficiency_finding(frame: pd.DataFrame, who: str) -> str:
    """The layer phase that takes the largest share of the step, and how close to the peak it runs."""
    top = _top(frame, "share_pct")
    peak = f" at {units.percent(top['peak_pct'])} of the FP32 peak" if pd.notna(top["peak_pct"]) else ""
    return f"{who}{top['layer']} {top['phase']} takes {units.percent(top['share_pct'])} of the step{peak}"


def _efficiency(run: Run) -> Body:
    frame = roofline.efficiency(run.store, run.id)
    if frame.empty:
        return _empty("no times; profile with --device NAME for the model's, or on a GPU")
    figure = bars.grouped(frame.assign(run=f"run {run.id}"), "ms", "run", "Time, FLOP/s against the FP32 peak, "
                          "and share of the step, per layer phase", run.sub, "time", panels=EFFICIENCY_PANELS)
    return Body(figure, _efficiency_finding(frame, ""), frame.drop(columns=["layer_id"]))


def _memory(run: Run) -> Body:
    """The model's peak as the run recorded it (reconcile.peak_memory, as show and the notebooks
    print it), and its parts where today's model still adds up to it."""
    from tracker.gpu.workload import is_module_spec
    from tracker.model import memory
    from tracker.nets import build

    row, peak = run.row, reconcile.peak_memory(run.store, run.id)
    if is_module_spec(row["network"]):  # a user's PyTorch model: the parts need the module, not stored
        return Body(None, peak.line(),
                    missing=f"the parts of the peak need tracker's own network, and {row['network']} is a PyTorch model")
    if peak.predicted_bytes is None:
        return Body(None, peak.line(), missing=f"run {run.id} stores no prediction of its peak")
    model = memory(build(row["network"], **(row["network_options"] or {})), int(row["batch"]), int(row["dtype_bits"]))
    if model.peak_bytes != peak.predicted_bytes:  # a run is never rewritten; its prediction stays as recorded
        return Body(None, peak.line(),
                    missing=f"the parts of the peak are left out: the model has changed since run {run.id} was "
                    f"recorded (it now predicts {units.nbytes(model.peak_bytes)}; profile again for the parts)")
    parts = pd.DataFrame([{"part": k.removesuffix("_bytes").replace("_", " "), "bytes": v}
                          for k, v in model.to_dict().items() if k != "peak_bytes"])
    figure = bars.memory(parts, model.peak_bytes, peak.measured_bytes, "GPU memory", run.sub)
    return Body(figure, peak.line(), parts)


def _fp(run: Run) -> Body | None:
    frame = fp.by_kind(run.store, run.id)
    if frame.empty:
        return None
    totals = frame.groupby("instruction")["instructions"].sum()
    per_layer = frame.groupby(["layer", "phase"], as_index=False)["instructions"].sum()
    most = _top(per_layer, "instructions")
    finding = (f"{totals.idxmax()} is {units.percent(100 * totals.max() / totals.sum())} of FP32 instructions; "
               f"most in {most['layer']} {most['phase']}")
    figure = bars.stacked(frame, "instruction", "instructions", "FP32 instructions", run.sub, "thread instructions")
    return Body(figure, finding, fp.fp_instructions(run.store, run.id)[
        ["layer", "phase", "fadd", "fmul", "ffma", "flops", "model_ops", "flops_per_model_op"]])


def _stalls(run: Run) -> Body | None:
    frame = stalls.by_category(run.store, run.id)
    if frame.empty:
        return None
    verdict = stalls.bound(run.store, run.id)
    ranked = verdict.merge(run.times[["layer_id", "phase", "ms"]], on=["layer_id", "phase"]).dropna(
        subset=["first_reason"])
    ranked = ranked.sort_values("ms", ascending=False) if ranked["ms"].notna().any() else ranked
    top = ranked.iloc[0]
    finding = (f"{top['layer']} {top['phase']}: top stalls {top['first_reason']}, {top['second_reason']} "
               f"-> {top['bound']}-bound")
    figure = bars.stacked(frame.assign(share_pct=100 * frame["share"]), "category", "share_pct",
                          "Stall breakdown (paper 003's categories)", run.sub, "share of stall samples")
    table = verdict[["layer", "phase", "first_reason", "first_share", "second_reason", "bound", "why"]]
    return Body(figure, finding, table.assign(first_share=100 * table["first_share"]).rename(
        columns={"first_share": "first_share_pct"}))


def _pipes(run: Run) -> Body | None:
    frame = utilization.pipes(run.store, run.id)
    if frame.empty:
        return None
    top = _top(frame, "pct")
    finding = f"busiest pipe: {top['pipe']} at {units.percent(top['pct'])} in {top['layer']} {top['phase']}"
    table = utilization.utilization(run.store, run.id).drop(columns=["run_id", "layer_id", "kind"], errors="ignore")
    return Body(bars.grouped(frame, "pct", "pipe", "ALU / pipe utilization", run.sub, "% of peak"), finding, table)


def _caches(run: Run) -> Body | None:
    frame = caches.by_level(run.store, run.id)
    if frame.empty:
        return None
    parts = []
    for level, rows in frame.groupby("level"):
        low = rows.loc[rows["hit_rate_pct"].idxmin()]
        parts.append(f"{level} {units.percent(rows['hit_rate_pct'].min())} to "
                     f"{units.percent(rows['hit_rate_pct'].max())} (lowest {low['layer']} {low['phase']})")
    over = frame[frame["hit_rate_pct"] > 100]
    if not over.empty:  # ncu's rates are not clamped: tracker/metrics.py says why, as `tracker metrics` does
        parts.append(f"over 100 % in {', '.join(over['layer'] + ' ' + over['phase'])}: ncu's figures, not clamped, "
                     "where hits and lookups were counted in different replay passes (tracker metrics l2_hit_rate)")
    table = caches.hit_rates(run.store, run.id).drop(columns=["run_id", "layer_id", "kind"], errors="ignore")
    return Body(bars.grouped(frame, "hit_rate_pct", "level", "Cache hit rates", run.sub, "hit rate"),
                "hit rates: " + "; ".join(parts), table)


def _traffic(run: Run) -> Body | None:
    frame = run.levels
    if frame.empty:
        return None
    by_level = frame.groupby("level")["transactions"].sum()
    finding = "transactions over the iteration: " + ", ".join(f"{lvl} {units.count(v)}" for lvl, v in by_level.items())
    panels = [(c, label) for c, label in (("transactions", "sectors / wavefronts"), ("bytes_per_s", "throughput"))
              if frame[c].notna().any()]
    figure = bars.grouped(frame, panels[0][0], "level", "Transactions and throughput per memory level", run.sub,
                          panels[0][1], log=True, panels=panels)
    return Body(figure, finding, frame.drop(columns=["layer_id"]))


def _levels(run: Run) -> Body | None:
    frame = run.levels
    frame = frame[frame["pct_of_peak"].notna()] if not frame.empty else frame
    if frame.empty:
        return None
    top = _top(frame, "pct_of_peak")
    finding = (f"closest to a peak: {top['level']} at {units.percent(top['pct_of_peak'])} in "
               f"{top['layer']} {top['phase']}")
    return Body(bars.grouped(frame, "pct_of_peak", "level", "Utilization per memory level", run.sub, "% of peak"),
                finding)


def _reconcile(run: Run) -> Body | None:
    frame = reconcile.reconcile(run.store, run.id)
    if frame.empty or frame["flops_ratio"].isna().all():
        return None
    worst = _top(frame, "flops_ratio")
    finding = (f"most FLOPs over the model: {worst['layer']} {worst['phase']} "
               f"({units.ratio(worst['flops_ratio'])} the model's ops)")
    if frame["dram_ratio"].notna().any():
        excess = _top(frame, "dram_ratio")
        finding += (f"; most DRAM traffic over the compulsory bytes: {excess['layer']} {excess['phase']} "
                    f"({units.ratio(excess['dram_ratio'])})")
    return Body(None, finding, frame.drop(columns=["run_id", "layer_id"]))


def _algorithms(run: Run) -> Body:
    frame = algorithms.per_phase(run.store, run.id)
    if frame.empty:
        return _empty("no launch names an algorithm (the model backend runs no kernel)")
    counts = frame.groupby("algorithm")["phase"].count().sort_values(ascending=False)
    conv = frame[frame["kind"] == "conv"]
    finding = ("; ".join(f"{r.layer} {r.phase}: {r.algorithm}" for r in conv.itertuples()) if not conv.empty
               else ", ".join(f"{name} in {n} layer phases" for name, n in counts.items()))
    return Body(None, finding, frame.drop(columns=["layer_id"]))


RUN_SECTIONS = (  # in the page's order
    Spec("algorithms", "Algorithm per layer phase (cuDNN, cuBLAS)", "paper 004", _algorithms, _is_library),
    Spec("runtime", "Time per layer", "Figures 6/7", _runtime),
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


def _speedup_finding(frame: pd.DataFrame) -> str:
    layers = frame[frame["layer"] != "iteration"].dropna(subset=["speedup"])
    if layers.empty:
        return "no comparable times"
    top = layers.loc[layers["change_pct"].abs().idxmax()]
    noise = layers["noise"].fillna(False).astype(bool)
    total = frame[frame["layer"] == "iteration"]
    whole = (f"; whole iteration {total['change_pct'].iloc[0]:+.1f}%"
             if not total.empty and pd.notna(total["change_pct"].iloc[0]) else "")
    return (f"largest change: {top['layer']} {top['phase']} {top['change_pct']:+.1f}%"
            f"{' (within noise)' if top['noise'] is True else ''}; {int(noise.sum())} of {len(layers)} layer phases "
            f"within the run-to-run spread{whole}")


def for_comparison(a: Run, b: Run) -> list[Section]:
    """Run B's speedup over run A (per image when their batch sizes differ), and B's roofline moves."""
    both = speedup.comparison(a.store, a.id, b.id)
    per = both["basis"].iloc[0]
    sub = f"run {b.id} ({b.sub}) over run {a.id} ({a.sub}); times {per}"
    title = f"Speedup of run {b.id} over run {a.id}, {per}"
    table = both[["layer", "phase", "a_ms", "b_ms", "spread_pct_a", "spread_pct_b", "speedup", "change_pct",
                  "noise"]]
    return [Section("speedup", title, "Figure 8", bars.speedup(both[both["layer"] != "iteration"], title, sub),
                    _speedup_finding(both), table), _side_by_side(a, b, sub),
            _moves(a.store, a.id, b.id, "roofline_moves", sub)]


def _side_by_side(a: Run, b: Run, sub: str) -> Section:
    """Paper 001's per-layer figure for both runs (ours tuned beside cuDNN's, in a U-Net's report):
    each layer phase's time, its FLOP/s against the FP32 peak and its share of the step."""
    label = {a.id: f"run {a.id}: {_implementation(a.row)}", b.id: f"run {b.id}: {_implementation(b.row)}"}
    frame = pd.concat([roofline.efficiency(run.store, run.id).assign(run=label[run.id]) for run in (a, b)],
                      ignore_index=True)
    title = f"Time, FLOP/s against the FP32 peak, and share of the step: run {a.id} beside run {b.id}"
    if frame.empty:
        return Section("efficiency_side_by_side", title, "paper 001", None, "no times")
    finding = "; ".join(_efficiency_finding(part, f"{name}: ") for name, part in frame.groupby("run", sort=False))
    return Section("efficiency_side_by_side", title, "paper 001",
                   bars.grouped(frame, "ms", "run", title, sub, "time", panels=EFFICIENCY_PANELS), finding,
                   frame.drop(columns=["layer_id"]))


def _implementation(run: pd.Series) -> str:
    """Whose kernels a run ran, in a legend's words: 'ours' ('ours, tuned' with `tracker tune`'s
    tiles) or 'PyTorch 2.11.0 (cuDNN, cuBLAS)'."""
    if _is_library(run):
        version = (run.get("library") or {}).get("torch")
        return f"PyTorch {version} (cuDNN, cuBLAS)" if version else "PyTorch (predicted)"
    return "ours, tuned" if run.get("tiles") or run.get("tuned_variants") else "ours"


def _moves(store, run_a: int, run_b: int, key: str, sub: str, what: str = "") -> Section:
    points, arrows, basis = roofline.moves(store, run_a, run_b)
    title = f"Roofline moves: run {run_a} -> run {run_b}{what}"
    figure = roofline_figure(points, roofline.roofs(store, run_b), f"{title}\n{sub}", basis, arrows)
    up = (arrows["y1"] > arrows["y0"]).sum()
    finding = f"{up} of {len(arrows)} layer phases move up (faster) from run {run_a} to run {run_b}"
    return Section(key, title, "paper 000 (★ the move per layer phase)", figure, finding)


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
    return {"experiment": f"e{info['id']}", "kind": info["kind"], "status": info["status"],
            "network": info["network"], **settings,
            "runs": ", ".join(f"{r.arm}: run {r.run_id}" for r in arms.itertuples())}


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
    summary = (f"Experiment e{experiment_id} ({info['kind']}, {info['status']}): {info['network']} at {batch_words} "
               f"on {device}, {len(arms)} runs ({', '.join(f'{r.arm}: run {r.run_id}' for r in arms.itertuples())}); "
               f"the baseline run: {describe(base)}")
    sections = (_batch_sections(store, experiment_id, batches, sub) if info["kind"] == "batch"
                else _memory_sections(store, experiment_id, sub) if info["kind"] == "memory"
                else _arm_sections(store, experiment_id, info["kind"], sub))
    return Report(f"Experiment e{experiment_id}: {info['kind']} on {info['network']}", summary,
                  _experiment_about(info, arms), sections, f"tracker profile {info['network']} --backend ncu")


def _batch_sections(store, experiment_id: int, batches: list[int], sub: str) -> list[Section]:
    frame = experiments.scaling(store, experiment_id)
    totals = experiments.batch_totals(frame).sort_values("batch")
    finding = "time per image over the iteration: " + ", ".join(
        f"batch {r.batch}: {units.milliseconds(r.ms_per_image)} ({units.count(r.images_per_s)} images/s)"
        for r in totals.itertuples())
    title = "Time per image per layer at batch " + ", ".join(map(str, batches))
    wide = frame.pivot_table(index=["layer_id", "layer", "phase"], columns="batch", values="ms_per_image")
    wide.columns = [f"batch_{b}_per_image_ms" for b in wide.columns]
    return [Section("batch_runtime", title, "Figures 6/7", bars.batch(frame, totals, title, sub), finding,
                    wide.reset_index().drop(columns=["layer_id"]))]


def _memory_sections(store, experiment_id: int, sub: str) -> list[Section]:
    """Paper 002's figure: each arm's peak memory of a training step, the model's beside the one
    measured (none on the model backend), over the options and batch sizes the experiment swept."""
    frame = experiments.memory(store, experiment_id)
    long = pd.concat([frame.assign(source=source, peak_bytes=frame[column])
                      for source, column in (("predicted", "predicted_peak_bytes"), ("measured", "measured_peak_bytes"))])
    long = long.assign(layer=long["arm"], phase="step")[["layer", "phase", "source", "peak_bytes"]]
    title = "Peak memory of a training step per arm: the model's and the measured"
    out = frame[frame["state"] != "complete"]
    finding = (experiments.memory_finding(store, experiment_id)
               + f"; {len(frame) - len(out)} of {len(frame)} arms complete"
               + (f"; out of memory or failed: {', '.join(out['arm'])}" if not out.empty else ""))
    ratios = frame["measured_over_predicted"].dropna()
    if not ratios.empty:
        finding += f"; measured / predicted {ratios.min():.2f} to {ratios.max():.2f}"
    return [Section("memory_peak", title, "paper 002", bars.grouped(long, "peak_bytes", "source", title, sub, "peak"),
                    finding, frame)]


TITLES = {"l1-bypass": ("L1 bypass (-dlcm=cg) speedup per layer", "paper 003 section 4 (6.2 %)"),
          "variants": ("Kernel variants against global", "memory placement"),
          "fusion": ("Fusion speedup per layer", "paper 003 section 4"),
          "library": ("PyTorch (cuDNN, cuBLAS) against our kernels per layer", "paper 003's library study"),
          "algorithms": ("Convolution algorithms against the default per layer", "paper 004 Figs. 8/9")}


def _algorithm_figures(frame: pd.DataFrame, sub: str) -> list[Section]:
    """Paper 004's Fig. 8 (time per conv layer phase and algorithm) and Fig. 9 (the workspace each
    holds, from the model), from the experiment's runs."""
    long = experiments.per_algorithm(frame)
    if long.empty:
        return []
    timed = long[long["ms"].notna()]
    finding = "fastest per conv layer phase: " + ", ".join(
        f"{layer} {phase} {tie(arms.iloc[best_of(arms['ms'].tolist())]['arm'].tolist())} "
        f"({units.milliseconds(arms['ms'].min())})" for (layer, phase), arms in timed.groupby(["layer", "phase"], sort=False))
    time_title, memory_title = "Time per conv layer phase and algorithm", "Workspace per conv layer phase and algorithm"
    table = long.drop(columns=["layer_id", "workspace_mib"])
    return [Section("algorithm_time", time_title, "paper 004 Fig. 8",
                    bars.grouped(long, "ms", "arm", time_title, sub, "time (ms)", log=True), finding, table),
            Section("algorithm_workspace", memory_title, "paper 004 Fig. 9",
                    bars.grouped(long[long["workspace_mib"].notna()], "workspace_mib", "arm", memory_title, sub,
                                 "workspace (MiB, the model's for the algorithm that ran)"),
                    "workspace the algorithm that ran holds beside its operands (the analytic model's)")]


def _arm_sections(store, experiment_id: int, kind: str, sub: str) -> list[Section]:
    frame = experiments.speedups(store, experiment_id)
    sections = []
    if kind == "fusion":
        pairs = experiments.fused_pairs(store, experiment_id)
        pairs = pairs.assign(change_pct=100 * (pairs["speedup"] - 1)) if not pairs.empty else pairs
        sections.append(Section("fusion_pairs", "Fusion speedup per conv/fc + ReLU pair", "paper 003 section 4 (4.0 %)",
                                bars.speedup(pairs, "Fusion: separate ReLU -> fused kernel", sub),
                                _speedup_finding(pd.concat([pairs, frame[frame["layer"] == "iteration"]])),
                                pairs.drop(columns=["layer_id"], errors="ignore")))
    title, paper = TITLES[kind]
    if kind == "algorithms":
        frame = experiments.algorithms(store, experiment_id)
    columns = ["comparison", "arm", "layer", "phase", "algorithm_a", "algorithm_b", "a_ms", "b_ms", "spread_pct_a",
               "spread_pct_b", "speedup", "change_pct", "noise", "workspace_bytes_b", "max_error_b",
               *experiments.CUDNN_COLUMNS, "l1_hit_rate_change", "l2_hit_rate_change", "first_reason_a", "first_reason_b"]
    columns = [c for c in columns if c in frame.columns]
    layers = frame[frame["layer"] != "iteration"] if not frame.empty else frame
    sections.append(Section(kind.replace("-", "_"), title, paper, bars.speedup(layers, title, sub),
                            _speedup_finding(frame), frame[columns] if not frame.empty else None))
    if kind == "algorithms":
        sections += _algorithm_figures(frame, sub)
    for base, other in experiments.pairs(store, experiment_id):
        what = f" ({base.comparison}: {base.arm} -> {other.arm})"
        sections.append(_moves(store, int(base.run_id), int(other.run_id), f"roofline_{other.run_id}", sub, what))
    return sections
