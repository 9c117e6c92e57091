"""The report's figures (paper 003 Figures 6-17, the hierarchical roofline, the experiments' speedups).

Each function takes the DataFrames of tracker/analysis and a subtitle (network, batch, GPU,
backend) and returns a matplotlib Figure, or None when the store holds nothing to draw.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

sns.set_theme(style="whitegrid", context="notebook")
PHASE_SHORT = {"fwd": "F", "bwd_data": "Bd", "bwd_weight": "Bw", "all": ""}


def _names(frame: pd.DataFrame) -> pd.Series:
    """'conv2 Bw': layer names with the phase abbreviated, for tick labels."""
    return (frame["layer"] + " " + frame["phase"].map(PHASE_SHORT).fillna(frame["phase"])).str.strip()


def _log_axis(ax, values: pd.Series) -> None:
    """Log scale with room below the smallest bar, so bars keep a visible length."""
    ax.set_yscale("log")
    positive = values[values > 0]
    if not positive.empty:
        ax.set_ylim(bottom=positive.min() / 10)


def _figure(n: int, title: str, subtitle: str, height: float = 4.8):
    width = min(22.0, max(9.0, 0.32 * n + 3))
    fig, ax = plt.subplots(figsize=(width, height), dpi=110)
    ax.set_title(f"{title}\n{subtitle}", fontsize=11)
    return fig, ax


def _finish(fig, ax, ylabel: str, legend: str | None = None):
    ax.set_xlabel("")
    ax.set_ylabel(ylabel)
    ax.tick_params(axis="x", labelrotation=75, labelsize=8)
    if legend and ax.get_legend():
        ax.legend(title=legend, fontsize=8, title_fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def _stacked(frame: pd.DataFrame, column: str, value: str, title: str, subtitle: str, ylabel: str, legend: str):
    if frame.empty:
        return None
    frame = frame.assign(name=_names(frame))
    order = list(dict.fromkeys(frame["name"]))
    wide = frame.pivot_table(index="name", columns=column, values=value, aggfunc="sum").reindex(order)
    fig, ax = _figure(len(order), title, subtitle)
    wide.plot(kind="bar", stacked=True, ax=ax, width=0.8, colormap="tab20")
    return _finish(fig, ax, ylabel, legend)


def _grouped(frame: pd.DataFrame, value: str, hue: str, title: str, subtitle: str, ylabel: str, log: bool = False):
    if frame.empty:
        return None
    frame = frame.assign(name=_names(frame))
    fig, ax = _figure(frame["name"].nunique(), title, subtitle)
    sns.barplot(data=frame, x="name", y=value, hue=hue, ax=ax)
    if log:
        _log_axis(ax, frame[value])
    return _finish(fig, ax, ylabel, hue)


def runtime(frame: pd.DataFrame, subtitle: str):
    """Figures 6/7: time per layer and phase (median over iterations, or the model's prediction)."""
    frame = frame[frame["ms"].notna() & (frame["ms"] > 0)]
    if frame.empty:
        return None
    source = "median kernel time" if (frame["source"] == "measured").all() else "model's predicted time"
    fig, ax = _figure(len(frame), f"Runtime per layer ({source})", subtitle)
    sns.barplot(data=frame.assign(name=_names(frame)), x="name", y="ms", hue="phase", dodge=False, ax=ax)
    return _finish(fig, ax, "ms", "phase")


def batch_runtime(frame: pd.DataFrame, subtitle: str):
    """Figures 6/7 across batch sizes: time per layer at each batch."""
    frame = frame[frame["ms"].notna() & (frame["ms"] > 0)]
    return _grouped(frame, "ms", "batch", "Runtime per layer per batch size", subtitle, "ms", log=True)


def speedup(frame: pd.DataFrame, title: str, subtitle: str):
    """Figure 8 and the experiments: change per layer phase (B over A); noise drawn pale."""
    frame = frame[frame["speedup"].notna()]
    if frame.empty:
        return None
    frame = frame.assign(name=_names(frame))
    hue = "arm" if "arm" in frame.columns and frame["arm"].nunique() > 1 else None
    fig, ax = _figure(frame["name"].nunique(), title, subtitle)
    sns.barplot(data=frame, x="name", y="change_pct", hue=hue, ax=ax)
    noisy = frame["noise"].fillna(False).astype(bool)
    for patch, is_noise in zip(ax.patches, noisy.tolist() if hue is None else []):
        patch.set_alpha(0.35 if is_noise else 1.0)
    ax.axhline(0, color="black", lw=0.8)
    if hue is None and noisy.any():
        ax.text(0.01, 0.97, "pale: within the run-to-run spread (noise)", transform=ax.transAxes, fontsize=8,
                va="top")
    return _finish(fig, ax, "speedup - 1 (%)", hue)


def fp_instructions(frame: pd.DataFrame, subtitle: str):
    """Figure 9: FP32 add, multiply and FMA thread instructions per layer phase."""
    return _stacked(frame, "instruction", "instructions", "FP32 instructions", subtitle, "thread instructions",
                    "instruction")


def stalls(frame: pd.DataFrame, subtitle: str):
    """Figures 10/11: each stall category's share of all stalls per layer phase."""
    return _stacked(frame.assign(share=100 * frame["share"]) if not frame.empty else frame, "category", "share",
                    "Stall breakdown (paper 003's categories)", subtitle, "% of stall samples", "reason")


def pipes(frame: pd.DataFrame, subtitle: str):
    """Figure 12: FMA, ALU, LSU and XU pipe utilization."""
    return _grouped(frame, "pct", "pipe", "ALU / pipe utilization", subtitle, "% of peak")


def hit_rates(frame: pd.DataFrame, subtitle: str):
    """Figures 13/14: L1/TEX and L2 hit rates."""
    return _grouped(frame, "hit_rate_pct", "level", "Cache hit rates", subtitle, "hit rate (%)")


def traffic(frame: pd.DataFrame, subtitle: str):
    """Figures 15/16: transactions and throughput per memory level (two panels)."""
    frame = frame.assign(name=_names(frame)) if not frame.empty else frame
    panels = [(c, label) for c, label in (("transactions", "sectors / wavefronts"), ("bytes_per_s", "bytes/s"))
              if not frame.empty and frame[c].notna().any()]
    if not panels:
        return None
    width = min(22.0, max(9.0, 0.32 * frame["name"].nunique() + 3))
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, 4.2 * len(panels)), dpi=110, squeeze=False)
    for ax, (column, label) in zip(axes[:, 0], panels):
        sns.barplot(data=frame[frame[column].notna()], x="name", y=column, hue="level", ax=ax)
        _log_axis(ax, frame[column].astype(float))
        ax.set_ylabel(label)
        ax.set_xlabel("")
        ax.tick_params(axis="x", labelrotation=75, labelsize=8)
    axes[0, 0].set_title(f"Transactions and throughput per memory level\n{subtitle}", fontsize=11)
    fig.tight_layout()
    return fig


def level_utilization(frame: pd.DataFrame, subtitle: str):
    """Figure 17: each memory level's throughput as a share of its peak."""
    frame = frame[frame["pct_of_peak"].notna()] if not frame.empty else frame
    return _grouped(frame, "pct_of_peak", "level", "Utilization per memory level", subtitle, "% of peak")


def roofline(points: pd.DataFrame, peaks: dict, subtitle: str):
    """Hierarchical roofline: achieved FLOP/s against intensity at L1, L2 and DRAM, under the roofs.
    A point with no FLOPs or no bytes at a level (a max-pool's backward, a level it never touched)
    has no place on log axes and is left out."""
    positive = np.isfinite(points["intensity"].astype(float)) & (points["intensity"] > 0) & (points["flops_per_s"] > 0)
    points = points[positive]
    if points.empty:
        return None
    fig, ax = plt.subplots(figsize=(11, 7), dpi=110)
    sns.scatterplot(data=points, x="intensity", y="flops_per_s", hue="level", style="phase", s=50, ax=ax)
    lo, hi = points["intensity"].min() / 4, points["intensity"].max() * 4
    x = np.geomspace(lo, hi, 200)
    compute = peaks.get("flops_per_s")
    for level, color in zip(("L1", "L2", "DRAM"), sns.color_palette("deep", 3)):
        if peaks.get(level):
            roof = x * peaks[level] if compute is None else np.minimum(compute, x * peaks[level])
            ax.plot(x, roof, color=color, lw=1.2, ls="--", label=f"{level} roof {peaks[level] / 1e9:,.0f} GB/s")
    if compute:
        ax.axhline(compute, color="black", lw=1.5, label=f"FP32 peak {compute / 1e12:.1f} TFLOP/s")
    for row in points[points["level"] == points["level"].iloc[0]].itertuples():
        ax.annotate(f"{row.layer} {PHASE_SHORT.get(row.phase, row.phase)}", (row.intensity, row.flops_per_s),
                    fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP / byte at that level)",
           ylabel="achieved FLOP/s", title=f"Hierarchical roofline\n{subtitle}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
