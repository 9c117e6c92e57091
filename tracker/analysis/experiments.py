"""An experiment's results: its runs, each arm's speedup over its comparison's baseline per layer,
phase and iteration, fusion per fused pair with the DRAM bytes it saved, and batch scaling."""

from __future__ import annotations

import json

import pandas as pd

from tracker.analysis import in_layer_order, run_row, view
from tracker.analysis.runtime import runtime
from tracker.analysis.speedup import comparison
from tracker.model.memory import PeakMemory
from tracker.ops.winograd import modelled
from tracker.store import Store
from tracker.store.queries import experiment_runs


def runs(store: Store, experiment_id: int) -> pd.DataFrame:
    """The experiment's runs in the order they ran: arm, comparison, baseline, and run settings."""
    return experiment_runs(store, experiment_id)


def pairs(store: Store, experiment_id: int):
    """(baseline row, other row) for every complete non-baseline run of each comparison whose
    baseline completed (an interrupted or failed arm is linked, but has nothing to compare)."""
    table = runs(store, experiment_id)
    table = table[table["status"] == "complete"]
    for _, group in table.groupby("comparison", sort=False):
        base = group[group["baseline"].astype(bool)]
        if base.empty:
            continue
        for _, other in group[~group["baseline"].astype(bool)].iterrows():
            yield base.iloc[0], other


def speedups(store: Store, experiment_id: int) -> pd.DataFrame:
    """Per comparison and arm: every layer phase's speedup over the baseline, plus an 'iteration' row
    per arm (the whole fwd+bwd), with spreads and noise marked (tracker/analysis/speedup.py), and,
    where both runs have counters, the change in L1/L2 hit rates, DRAM bytes and dominant stall."""
    frames = []
    for base, other in pairs(store, experiment_id):
        frame = comparison(store, int(base.run_id), int(other.run_id))
        frame.insert(0, "arm", other.arm)
        frame.insert(0, "baseline_arm", base.arm)
        frame.insert(0, "comparison", base.comparison)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def fused_pairs(store: Store, experiment_id: int) -> pd.DataFrame:
    """Fusion per conv/fc + ReLU pair and phase: separate_ms (both layers) against fused_ms (the fused
    kernel; its ReLU launches nothing), speedup, noise, and the DRAM bytes fusion saved against the
    model's compulsory bytes of the ReLU removed (measured only with counters)."""
    frames = []
    for base, other in pairs(store, experiment_id):
        sep, fused = runtime(store, int(base.run_id)), runtime(store, int(other.run_id))
        layers = view(store, "layer", int(base.run_id))
        gone = fused[(fused["kind"] == "relu") & (fused["launches"] == 0)]
        feeds = layers.set_index("name")["inputs"].map(_first_input)
        for _, relu in gone.iterrows():
            frames.append(_pair(store, int(base.run_id), int(other.run_id), feeds[relu.layer], relu, sep))
    return in_layer_order(pd.DataFrame(frames)) if frames else pd.DataFrame()


def _first_input(inputs) -> str:
    return (json.loads(inputs) if isinstance(inputs, str) else inputs)[0]


def _pair(store: Store, run_sep: int, run_fused: int, producer: str, relu, sep: pd.DataFrame) -> dict:
    """One fused pair in one phase (the ReLU's phase: its fwd folds into the producer's fwd, its
    bwd_data into the producer's bwd_data)."""
    names, phase = (producer, relu.layer), relu.phase
    a, b = (_pair_times(store, run, names, phase) for run in (run_sep, run_fused))
    judged = len(a) > 1 and len(b) > 1
    separate, fused = (float(t.median()) if len(t) else None for t in (a, b))
    dram = [_dram(store, run, names, phase) for run in (run_sep, run_fused)]
    return {
        "layer_id": int(sep.loc[sep.layer == producer, "layer_id"].iloc[0]),
        "layer": producer,
        "relu": relu.layer,
        "phase": phase,
        "separate_ms": separate,
        "fused_ms": fused,
        "speedup": separate / fused if separate and fused else None,
        "noise": bool(a.min() <= b.max() and b.min() <= a.max()) if judged else None,
        "dram_bytes_saved": dram[0] - dram[1] if dram[0] is not None and dram[1] is not None else None,
        "model_relu_bytes": int(sep.loc[(sep.layer == relu.layer) & (sep.phase == phase), "bytes"].iloc[0]),
    }


def _pair_times(store: Store, run_id: int, names, phase: str) -> pd.Series:
    """The pair's summed time per measured iteration."""
    times = view(store, "layer_time_repeat", run_id).merge(
        view(store, "layer", run_id)[["layer_id", "name"]], on="layer_id"
    )
    return times[times["name"].isin(names) & (times["phase"] == phase)].groupby("repeat")["measured_ms"].sum()


def _dram(store: Store, run_id: int, names, phase: str) -> float | None:
    t = view(store, "memory_traffic", run_id)
    rows = t[t["layer"].isin(names) & (t["phase"] == phase)]
    total = (rows["dram_read_bytes"] + rows["dram_write_bytes"]).sum(min_count=1)
    return None if rows.empty or pd.isna(total) else float(total)


def scaling(store: Store, experiment_id: int) -> pd.DataFrame:
    """Batch experiments: per layer and phase, the time at each batch size and per image (complete
    runs only: an interrupted batch size is linked but not shown), with each run's arm and GPU kind."""
    frames = []
    table = runs(store, experiment_id)
    for _, run in table[table["status"] == "complete"].iterrows():
        frame = runtime(store, int(run.run_id))[
            ["layer_id", "layer", "kind", "phase", "ms", "spread_pct", "source", "ops", "bytes"]
        ]
        frames.append(
            frame.assign(
                batch=int(run.batch),
                ms_per_image=frame["ms"] / int(run.batch),
                run_id=int(run.run_id),
                arm=run.arm,
                gpu=run.gpu,
            )
        )
    return in_layer_order(pd.concat(frames, ignore_index=True)) if frames else pd.DataFrame()


def batch_totals(frame: pd.DataFrame, swept: tuple[str, ...] = ()) -> pd.DataFrame:
    """A batch experiment's whole training step per batch size (and per value of the ``swept``
    columns, arm and gpu, where it swept variants or GPUs), from ``scaling``'s rows: step_ms, ops
    and bytes summed over the layer phases, then ms_per_image and images_per_s."""
    if frame.empty:
        return frame
    totals = (
        frame.groupby([*swept, "batch"], as_index=False, sort=False, dropna=False)[["ms", "ops", "bytes"]]
        .sum(min_count=1)
        .rename(columns={"ms": "step_ms"})
    )
    return totals.assign(
        ms_per_image=totals["step_ms"] / totals["batch"], images_per_s=totals["batch"] / (totals["step_ms"] / 1e3)
    )


def across(store: Store, experiment_id: int, axis: str) -> pd.DataFrame:
    """A sweep's arms compared along one of its axes, ``gpu`` (GPU against GPU, paper 003 Fig. 8) or
    ``batch`` (per image), the other coordinates held: per layer and phase, each value's speedup
    over the axis's first value, as ``speedups`` gives it. Empty unless the axis has two values."""
    from tracker.store.queries import arm_rows

    planned = arm_rows(store, experiment_id)
    arms = [a for a in planned if a.run_id is not None]
    coordinate = {"gpu": lambda a: a.gpu, "batch": lambda a: a.spec["batch"]}[axis]
    values = list(dict.fromkeys(coordinate(a) for a in planned))
    if len(values) < 2:
        return pd.DataFrame()
    held = {"gpu": lambda a: (a.spec["arm"], a.spec["batch"]), "batch": lambda a: (a.spec["arm"], a.gpu)}[axis]
    complete = {(held(a), coordinate(a)): a for a in arms if a.state == "complete"}
    frames = []
    for (key, value), arm in complete.items():
        base = complete.get((key, values[0]))
        if value == values[0] or base is None:
            continue
        frame = comparison(store, int(base.run_id or 0), int(arm.run_id or 0))  # complete: both have a run
        frame.insert(0, "arm", arm.label)
        frame.insert(0, "baseline_arm", base.label)
        frame.insert(0, "comparison", f"{axis} {values[0]} -> {value}")
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


# cuDNN beside ours in an algorithms table, each from its own stored library run: column prefix ->
# (whether cudnn.benchmark chose its algorithms, its arm in ``per_algorithm``); each prefix has an
# _algorithm, an _ms and a _run column
CUDNN = {"library": (False, "cuDNN (library run)"), "library_best": (True, "cuDNN best (cudnn.benchmark)")}
CUDNN_COLUMNS = tuple(f"{prefix}_{column}" for prefix in CUDNN for column in ("algorithm", "ms"))  # what tables show


def algorithms(store: Store, experiment_id: int) -> pd.DataFrame:
    """Per conv layer phase and arm of an algorithms experiment: the speedups (with the algorithm
    that ran: a Winograd arm's conv1 ran the implicit GEMM), the model's workspace of the
    algorithm that ran, its error where this GPU's selftest record holds one, and, where the
    store holds a complete library run of the same network, batch and GPU, the algorithm cuDNN
    chose and its time: by its heuristic (``library_*``) and, with cudnn.benchmark, its fastest
    (``library_best_*``)."""
    from tracker.model.algorithms import conv_cost
    from tracker.store.queries import latest_library_run

    frame = speedups(store, experiment_id)
    if frame.empty:
        return frame
    base = runs(store, experiment_id).iloc[0]
    info = run_row(store, int(base.run_id))
    layers, batch, width = _stored_convs(store, int(base.run_id)), int(info["batch"]), int(info["dtype_bits"]) // 8
    conv = frame[(frame["kind"] == "conv") | (frame["layer"] == "iteration")].copy()
    variants = {row.arm: row.variants for row in runs(store, experiment_id).itertuples()}

    def workspace(r, algorithm: str, arm: str) -> int | None:
        name = modelled(algorithm, _conv_variant(variants.get(arm)))
        return (
            width * conv_cost(layers[r.layer], r.phase, batch, name).workspace if r.layer in layers and name else None
        )

    conv["workspace_bytes_a"] = [workspace(r, r.algorithm_a, r.baseline_arm) for r in conv.itertuples()]
    conv["workspace_bytes_b"] = [workspace(r, r.algorithm_b, r.arm) for r in conv.itertuples()]
    conv["max_error_b"] = _errors(conv, variants, info["device_name"])
    for prefix, (best, _) in CUDNN.items():
        library = latest_library_run(store, info["network"], batch, info["device_name"], cudnn_benchmark=best)
        if library is not None:
            cudnn = runtime(store, library)[["layer_id", "phase", "algorithm", "ms"]].rename(
                columns={"algorithm": f"{prefix}_algorithm", "ms": f"{prefix}_ms"}
            )
            conv = conv.merge(cudnn, on=["layer_id", "phase"], how="left").assign(**{f"{prefix}_run": library})
    return conv


def per_algorithm(frame: pd.DataFrame) -> pd.DataFrame:
    """An algorithms experiment's table (``algorithms``) as paper 004's Figs. 8 and 9 draw it: per
    conv layer phase, one row per arm, the baseline's included once, with its time and the
    model's workspace of the algorithm that ran, and cuDNN's times (heuristic, best) where library runs are stored."""
    rows = frame[frame["layer"] != "iteration"]
    if rows.empty:
        return pd.DataFrame()
    keys = ["layer_id", "layer", "phase"]
    base = rows.drop_duplicates(keys).assign(
        arm=rows["baseline_arm"], ms=rows["a_ms"], workspace_bytes=rows["workspace_bytes_a"], ran=rows["algorithm_a"]
    )
    others = rows.assign(ms=rows["b_ms"], workspace_bytes=rows["workspace_bytes_b"], ran=rows["algorithm_b"])
    parts = [base, others]
    for prefix, (_, arm) in CUDNN.items():
        if f"{prefix}_ms" in rows:
            parts.append(
                rows.drop_duplicates(keys).assign(
                    arm=arm, ms=rows[f"{prefix}_ms"], workspace_bytes=None, ran=rows[f"{prefix}_algorithm"]
                )
            )
    columns = [*keys, "arm", "ran", "ms", "workspace_bytes"]
    long = pd.concat([part[columns] for part in parts], ignore_index=True)
    return in_layer_order(long.assign(workspace_mib=long["workspace_bytes"].astype(float) / 2**20))


def _errors(conv: pd.DataFrame, variants: dict, device: str | None) -> list[float | None]:
    """Per row, the arm's largest error at that layer phase as this GPU's newest selftest record
    holds it (tracker selftest --record: relative to the reference's largest value), or None."""
    from tracker.gpu.verified import layer_error, records

    history = records()
    found = []
    for r in conv.itertuples():
        variant = _conv_variant(variants.get(r.arm))
        entry = layer_error(history, device, f"conv/{r.phase}/{variant}", r.layer) if variant else None
        found.append(entry.get("max") if entry else None)
    return found


def _conv_variant(variants) -> str | None:
    """A run's conv variant from its variants column (JSON text on SQLite)."""
    chosen = json.loads(variants) if isinstance(variants, str) else variants
    return (chosen or {}).get("conv")


def _stored_convs(store: Store, run_id: int) -> dict:
    """The run's conv layers as the store holds them (name -> Layer), for the model's costs: read
    back, not rebuilt by the network's name, which a test's or a user's network does not have."""
    from tracker.nets.layers import Conv, Layer

    def decode(value):
        return json.loads(value) if isinstance(value, str) else value  # SQLite gives JSON as text

    layers = {}
    for row in view(store, "layer", run_id).itertuples():
        if row.kind != "conv":
            continue
        a = decode(row.attributes)
        op = Conv(
            a["out_channels"], tuple(a["kernel"]), tuple(a["stride"]), tuple(a["padding"]), a["groups"], a["bias"]
        )
        layers[row.name] = Layer(
            int(row.layer_id),
            row.name,
            op,
            tuple(decode(row.inputs)),
            tuple(tuple(s) for s in decode(row.input_shapes)),
            tuple(decode(row.output_shape)),
            int(row.params),
            True,
        )
    return layers


MEMORY_COLUMNS = (
    "arm",
    "implementation",
    "options",
    "batch",
    "state",
    "predicted_peak_bytes",
    "measured_peak_bytes",
    "measured_over_predicted",
    "reason",
)


def memory(store: Store, experiment_id: int) -> pd.DataFrame:
    """Paper 002's study: every arm (each implementation at each network option and batch size) with
    the model's peak memory of a training step beside the one measured (ours: the backend's
    allocator's high-water mark; PyTorch's: torch.cuda.max_memory_allocated), and why an arm did
    not complete (out of memory: the reason says so)."""
    from tracker.store import find_run
    from tracker.store.queries import arm_rows

    rows = []
    for arm in arm_rows(store, experiment_id):
        run = find_run(store, str(arm.run_id)) if arm.run_id is not None else None
        peak = PeakMemory.of(
            run.predicted_peak_bytes if run is not None else None,
            run.measured_peak_bytes if run is not None and run.status == "complete" else None,
        )
        rows.append(
            dict(
                arm=arm.label,
                implementation=arm.spec["implementation"],
                options=" ".join(f"{k}={v}" for k, v in arm.spec.get("options", {}).items()),
                batch=arm.spec["batch"],
                state=arm.state,
                predicted_peak_bytes=peak.predicted_bytes,
                measured_peak_bytes=peak.measured_bytes,
                measured_over_predicted=peak.ratio,
                reason=arm.reason,
            )
        )
    return pd.DataFrame(rows, columns=list(MEMORY_COLUMNS))


def memory_finding(store: Store, experiment_id: int) -> str:
    """The memory study's answer in words, from the model: the largest batch of the experiment's
    network whose predicted peak fits each GPU (those it swept, else every catalog GPU whose
    capacity the catalog gives), and where the peak of its first arm goes, part by part."""
    from tracker import units
    from tracker.model import CATALOG, lookup, memory
    from tracker.model.memory import PARTS, largest_batch
    from tracker.nets import build
    from tracker.store import find_experiment
    from tracker.store.queries import arm_rows

    experiment = find_experiment(store, experiment_id)
    arms = arm_rows(store, experiment_id)
    first = arms[0].spec if arms else {"batch": experiment.settings["batch"]}
    net = build(experiment.network, **{**experiment.network_options, **first.get("options", {})})
    swept = [lookup(gpu) for gpu in experiment.settings.get("gpus") or []]
    capacities = {gpu.name: gpu.memory_gb * 1e9 for gpu in swept or CATALOG if gpu.memory_gb}
    fits = ", ".join(f"{name} {largest_batch(net, capacity):,}" for name, capacity in capacities.items())
    peak = memory(net, first["batch"])
    parts = sorted(((getattr(peak, key), name) for key, name in PARTS.items() if getattr(peak, key)), reverse=True)
    shares = ", ".join(f"{name} {units.percent(100 * size / peak.peak_bytes)}" for size, name in parts)
    return (
        f"the largest batch of {net.name} whose predicted peak fits: {fits or 'no GPU with a known capacity'}; "
        f"at batch {first['batch']} the peak of {units.nbytes(peak.peak_bytes)} is {shares}"
    )


def results(store: Store, experiment_id: int, kind: str) -> pd.DataFrame:
    """The table ``tracker experiment`` prints: fused pairs for fusion, time per batch for batch,
    each algorithm per conv layer phase for algorithms, each arm's peak memory for memory,
    speedups per arm, layer and phase for the others."""
    if kind == "batch":
        return scaling(store, experiment_id)
    if kind == "algorithms":
        return algorithms(store, experiment_id)
    if kind == "memory":
        return memory(store, experiment_id)
    frame = speedups(store, experiment_id)
    if kind == "fusion":
        pairs = fused_pairs(store, experiment_id)
        iteration = frame[frame["layer"] == "iteration"] if not frame.empty else frame
        return pd.concat(
            [pairs, iteration.rename(columns={"a_ms": "separate_ms", "b_ms": "fused_ms"})], ignore_index=True
        )[[c for c in FUSION_COLUMNS if c in pairs.columns or c in iteration]]
    return l1_alone(frame) if kind == "l1-bypass" else frame


# The l1-bypass experiment's arm labels after each variant's name (tracker.experiment.arms uses them)
CACHED_ARM, BYPASS_ARM, STAGED_ARM = " ca", " cg", " ca staged"


def l1_alone(frame: pd.DataFrame) -> pd.DataFrame:
    """An l1-bypass experiment's speedups with, on each cg row that has a staged arm beside it,
    ``l1_speedup``: the staged build's time over the cg build's, the same code with L1 cached and
    bypassed, so what the L1 alone is worth (the cg row's own speedup also holds what the cp.async
    copies of the ca build are worth)."""
    if frame.empty or not frame["arm"].str.endswith(STAGED_ARM).any():
        return frame.assign(l1_speedup=None) if not frame.empty else frame
    keys = ["comparison", "layer", "phase"]
    staged = frame[frame["arm"].str.endswith(STAGED_ARM)][[*keys, "b_ms"]].rename(columns={"b_ms": "staged_ms"})
    out = frame.merge(staged, on=keys, how="left")
    cg = out["arm"].str.endswith(BYPASS_ARM)
    out["l1_speedup"] = (out["staged_ms"] / out["b_ms"]).where(cg & out["staged_ms"].notna())
    return out.drop(columns=["staged_ms"])


FUSION_COLUMNS = (
    "layer",
    "relu",
    "phase",
    "separate_ms",
    "fused_ms",
    "speedup",
    "noise",
    "dram_bytes_saved",
    "model_relu_bytes",
)
