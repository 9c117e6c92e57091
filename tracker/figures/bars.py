"""Per-layer figures as horizontal bars: one row per layer phase in network order, top to bottom,
so the names read across and the figure grows in height with the network (AlexNet's 49 rows,
unet3d's 170). Tick labels carry the phase's colour; bars coloured by something else (a memory
level, a stall category, a batch size) use palettes that share no colour with the phases. Log
axes start at a labelled power of ten below the smallest bar, so every bar has a visible length.

Each function takes a long-form DataFrame from tracker/analysis (``layer``, ``phase`` and values)
and a title, and returns a Figure, or None when there is nothing to draw.
"""

from __future__ import annotations

import math

import pandas as pd

from tracker import units
from tracker.figures import PHASE_COLORS, drawing, label, new_figure

ROW_INCHES = 0.19  # height of one layer phase's row
PANEL_TITLE_INCHES = 0.3  # the figure's two-line title above panels that have titles of their own
LEVEL_COLORS = {"L1/TEX": "#8172B3", "L1": "#8172B3", "shared": "#DA8BC3", "L2": "#937860", "DRAM": "#222222"}
OTHER_PALETTE = "tab20b"  # categories that are not phases: no blue/orange/green of the phases


def _names(frame: pd.DataFrame) -> pd.Series:
    return pd.Series([label(r.layer, r.phase) for r in frame.itertuples()], index=frame.index)


def _palette(values: list, kind: str) -> dict:
    import seaborn as sns

    if kind == "phase":
        return {v: PHASE_COLORS.get(v, "#555555") for v in values}
    if kind == "level" and all(v in LEVEL_COLORS for v in values):
        return {v: LEVEL_COLORS[v] for v in values}
    if kind == "batch":
        return dict(zip(values, sns.color_palette("rocket_r", len(values) + 1)[1:]))
    return dict(zip(values, sns.color_palette(OTHER_PALETTE, max(len(values), 3))))


def _canvas(rows: int, ncols: int = 1, width: float = 10.0, slots: int = 1):
    """A figure tall enough for ``rows`` rows of ``slots`` bars each, ``ncols`` panels sharing the rows."""
    height = 1.9 + rows * ROW_INCHES * max(1.0, slots / 2.5)
    return new_figure(width if ncols == 1 else width * 0.55 * ncols, height, ncols=ncols, sharey=True)


def _rows_axis(ax, order: list[str], phases: list[str]) -> None:
    """Row names top to bottom, each in its phase's colour."""
    ax.set_yticks(range(len(order)), order, fontsize=8)
    for tick, phase in zip(ax.get_yticklabels(), phases):
        tick.set_color(PHASE_COLORS.get(phase, "#333333"))
    ax.set_ylim(len(order) - 0.5, -0.5)
    ax.grid(axis="y", visible=False)


def _log_base(values: pd.Series) -> float:
    positive = values[values > 0]
    return 10 ** math.floor(math.log10(positive.min())) if not positive.empty else 1.0


def _axis(ax, unit_column: str, xlabel: str, log: bool, base: float = 0.0) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.set_xlabel(xlabel + (" (log scale)" if log else ""))
    if log:
        ax.set_xscale("log")
        ax.set_xlim(left=base)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: units.axis_tick(unit_column, v)))
    ax.xaxis.set_ticks_position("bottom")
    ax.tick_params(axis="x", labelsize=8, labeltop=True, top=True)  # scale at the top too, for tall figures


def _title(fig, ax, title: str, subtitle: str) -> None:
    ax.set_title(f"{title}\n{subtitle}", fontsize=11, loc="left")
    fig.tight_layout()


def _legend(ax, handles: list, title: str) -> None:
    """The legend beside the axes, right of the data, never over a bar (tight_layout makes room)."""
    ax.legend(handles=handles, title=title, fontsize=8, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))


def _patches(palette: dict) -> list:
    from matplotlib.patches import Patch

    return [Patch(color=color, label=str(name)) for name, color in palette.items()]


def _ordered(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str], list[str]]:
    frame = frame.assign(name=_names(frame))
    first = frame.drop_duplicates("name")
    return frame, list(first["name"]), list(first["phase"])


@drawing
def by_phase(
    frame: pd.DataFrame,
    value: str,
    title: str,
    subtitle: str,
    xlabel: str,
    log: bool = False,
    pale: pd.Series | None = None,
    zero_line: bool = False,
):
    """One bar per layer phase, in its phase's colour; ``pale`` marks bars drawn faint (noise)."""
    frame = frame[frame[value].notna()]
    if frame.empty:
        return None
    frame, order, phases = _ordered(frame)
    fig, ax = _canvas(len(order))
    base = _log_base(frame[value]) if log else 0.0
    colors = [PHASE_COLORS.get(p, "#555555") for p in frame["phase"]]
    alphas = [
        0.35 if is_pale else 1.0
        for is_pale in (
            pale.reindex(frame.index).fillna(False).astype(bool) if pale is not None else [False] * len(frame)
        )
    ]
    positions = [order.index(n) for n in frame["name"]]
    bars = ax.barh(positions, frame[value] - base, left=base, color=colors, height=0.75)
    for bar, alpha in zip(bars, alphas):
        bar.set_alpha(alpha)
    if zero_line:
        ax.axvline(0, color="black", lw=0.8)
    _rows_axis(ax, order, phases)
    _axis(ax, value, xlabel, log, base)
    present = [p for p in PHASE_COLORS if p in set(frame["phase"])]
    handles = _patches({p: PHASE_COLORS[p] for p in present})
    if pale is not None and any(a < 1 for a in alphas):
        from matplotlib.patches import Patch

        handles.append(Patch(color="#999999", alpha=0.35, label="within run-to-run spread"))
    _legend(ax, handles, "phase")
    _title(fig, ax, title, subtitle)
    return fig


@drawing
def grouped(
    frame: pd.DataFrame,
    value: str,
    hue: str,
    title: str,
    subtitle: str,
    xlabel: str,
    log: bool = False,
    panels: list[tuple[str, str]] | None = None,
):
    """Per layer phase, one bar per ``hue`` value (memory level, pipe, batch) side by side; with
    ``panels`` [(column, xlabel)], one panel per column sharing the rows."""
    panels = panels or [(value, xlabel)]
    frame = frame[frame[[c for c, _ in panels]].notna().any(axis=1)]
    if frame.empty:
        return None
    frame, order, phases = _ordered(frame)
    groups = list(dict.fromkeys(frame[hue]))
    palette = _palette(groups, hue)
    fig, axes = _canvas(len(order), ncols=len(panels), slots=len(groups))
    axes = axes if len(panels) > 1 else [axes]
    height = 0.8 / len(groups)
    for ax, (column, axis_label) in zip(axes, panels):
        rows = frame[frame[column].notna()]
        base = _log_base(rows[column].astype(float)) if log and not rows.empty else 0.0
        for i, group in enumerate(groups):
            part = rows[rows[hue] == group]
            positions = [order.index(n) - 0.4 + height * (i + 0.5) for n in part["name"]]
            ax.barh(positions, part[column].astype(float) - base, left=base, height=height, color=palette[group])
        _rows_axis(ax, order, phases)
        _axis(ax, column, axis_label, log, base)
    _legend(axes[-1], _patches(palette), hue)
    if len(panels) > 1:  # a tall figure's panels are named at the top, where a reader starts
        for ax, (_, axis_label) in zip(axes, panels):
            ax.set_title(axis_label, fontsize=10, loc="left")
        height = fig.get_figheight()  # inches: the title's room above the panels' titles and top ticks
        fig.suptitle(f"{title}\n{subtitle}", fontsize=11, x=0.01, y=1 - 0.08 / height, ha="left", va="top")
        fig.tight_layout(rect=(0, 0, 1, 1 - PANEL_TITLE_INCHES / height))
    else:
        _title(fig, axes[0], title, subtitle)
    return fig


@drawing
def stacked(frame: pd.DataFrame, column: str, value: str, title: str, subtitle: str, xlabel: str):
    """Per layer phase, ``value`` split by ``column`` (stall reason, instruction kind), stacked."""
    if frame.empty:
        return None
    frame, order, phases = _ordered(frame)
    wide = frame.pivot_table(index="name", columns=column, values=value, aggfunc="sum").reindex(order).fillna(0)
    palette = _palette(list(wide.columns), column)
    fig, ax = _canvas(len(order), width=11)
    left = pd.Series(0.0, index=wide.index)
    for part in wide.columns:
        ax.barh(range(len(order)), wide[part], left=left, height=0.75, color=palette[part])
        left += wide[part]
    _rows_axis(ax, order, phases)
    _axis(ax, value, xlabel, log=False)
    _legend(ax, _patches(palette), column)
    _title(fig, ax, title, subtitle)
    return fig


@drawing
def speedup(frame: pd.DataFrame, title: str, subtitle: str):
    """Change per layer phase (B over A, percent), one panel per arm; noise drawn pale."""
    frame = frame[frame["speedup"].notna()]
    if frame.empty:
        return None
    arms = list(dict.fromkeys(frame["arm"])) if "arm" in frame.columns else [None]
    frame, order, phases = _ordered(frame)
    fig, axes = _canvas(len(order), ncols=len(arms))
    axes = axes if len(arms) > 1 else [axes]
    for ax, arm in zip(axes, arms):
        part = frame if arm is None else frame[frame["arm"] == arm]
        noisy = part["noise"].fillna(False).astype(bool) if "noise" in part.columns else pd.Series(False, part.index)
        bars = ax.barh(
            [order.index(n) for n in part["name"]],
            part["change_pct"],
            height=0.75,
            color=[PHASE_COLORS.get(p, "#555555") for p in part["phase"]],
        )
        for bar, is_noise in zip(bars, noisy):
            bar.set_alpha(0.35 if is_noise else 1.0)
        ax.axvline(0, color="black", lw=0.8)
        _rows_axis(ax, order, phases)
        _axis(ax, "change_pct", "speedup - 1 (%): right is faster", log=False)
        if arm is not None and len(arms) > 1:
            ax.set_title(str(arm), fontsize=10)
    from matplotlib.patches import Patch

    handles = _patches({p: PHASE_COLORS[p] for p in PHASE_COLORS if p in set(frame["phase"])})
    handles.append(Patch(color="#999999", alpha=0.35, label="within run-to-run spread"))
    _legend(axes[-1], handles, "phase")
    fig.suptitle(f"{title}\n{subtitle}", fontsize=11, x=0.01, ha="left")
    fig.tight_layout()
    return fig


@drawing
def batch(frame: pd.DataFrame, totals: pd.DataFrame, title: str, subtitle: str):
    """Batch experiments: time per image per layer phase at each batch (log), and beside it each
    batch's whole iteration per image and its throughput (images/s)."""
    frame = frame[frame["ms_per_image"].notna() & (frame["ms_per_image"] > 0)]
    if frame.empty:
        return None
    frame, order, phases = _ordered(frame)
    batches = sorted(set(frame["batch"]))
    palette = _palette(batches, "batch")
    height = 2.6 + len(order) * ROW_INCHES * max(1.0, len(batches) / 2.5)
    fig, _ = new_figure(15, height, ncols=0)
    panel = min(2.6, height / 2)  # the totals stay small beside a tall figure
    grid = fig.add_gridspec(3, 2, width_ratios=(2.2, 1), height_ratios=(panel, panel, max(height - 2 * panel, 0.1)))
    ax = fig.add_subplot(grid[:, 0])
    height = 0.8 / len(batches)
    base = _log_base(frame["ms_per_image"])
    for i, b in enumerate(batches):
        part = frame[frame["batch"] == b]
        ax.barh(
            [order.index(n) - 0.4 + height * (i + 0.5) for n in part["name"]],
            part["ms_per_image"] - base,
            left=base,
            height=height,
            color=palette[b],
        )
    _rows_axis(ax, order, phases)
    _axis(ax, "ms_per_image", "time per image", log=True, base=base)
    spare = fig.add_subplot(grid[2, 1])  # under the totals: the legend's own cell, clear of every bar
    spare.axis("off")
    spare.legend(
        handles=_patches({f"batch {b}": palette[b] for b in batches}),
        title="batch",
        fontsize=8,
        title_fontsize=8,
        loc="upper left",
    )
    ax.set_title(f"{title}\n{subtitle}", fontsize=11, loc="left")
    for row, (column, xlabel) in enumerate(
        (("ms_per_image", "iteration time per image"), ("images_per_s", "throughput (images/s)"))
    ):
        side = fig.add_subplot(grid[row, 1])
        _axis(side, column, xlabel, log=False)
        side.barh(
            [f"batch {b}" for b in totals["batch"]],
            totals[column],
            color=[palette.get(b, "#555555") for b in totals["batch"]],
        )
        side.invert_yaxis()
        side.tick_params(labelsize=8, labeltop=False, top=False)
        for i, v in enumerate(totals[column]):
            side.text(v, i, " " + units.number(column, v), va="center", fontsize=8)
        side.margins(x=0.25)
    fig.tight_layout()
    return fig


@drawing
def memory(parts: pd.DataFrame, peak: float, measured: float | None, title: str, subtitle: str):
    """The model's memory by part (``part``, ``bytes``), its peak, and the measured peak if any."""
    fig, ax = new_figure(10, 1.9 + 0.35 * (len(parts) + 1))
    names = list(parts["part"]) + ["model's peak"]
    values = list(parts["bytes"]) + [peak]
    colors = list(_palette(list(parts["part"]), "part").values()) + ["#555555"]
    ax.barh(range(len(names)), values, color=colors, height=0.7)
    for i, v in enumerate(values):
        ax.text(v, i, " " + units.nbytes(v), va="center", fontsize=8)
    if measured:
        ax.axvline(measured, color="#C44E52", lw=1.5, ls="--")
        ax.text(
            measured,
            len(names) - 0.5,
            f" measured peak {units.nbytes(measured)}",
            color="#C44E52",
            fontsize=8,
            va="bottom",
        )
    ax.set_yticks(range(len(names)), names, fontsize=9)
    ax.set_ylim(len(names) - 0.4, -0.6)
    ax.margins(x=0.2)
    _axis(ax, "bytes", "bytes", log=False)
    _title(fig, ax, title, subtitle)
    return fig
