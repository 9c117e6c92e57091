"""The roofline, drawn one way everywhere: the device's roofs per memory level with their ridge
points, one point per layer phase (colour and marker by phase), labels placed so none overlaps
another, and for an experiment an arrow per layer phase from the baseline to the variant.

``points`` is long form, one row per layer, phase and level: ``layer``, ``phase``, ``level``
('L1', 'L2', 'DRAM', or 'compulsory' for the model's bytes, read against the DRAM roof),
``intensity`` (FLOP/byte at that level) and ``flops_per_s``. ``basis`` says what the points are:
'counters' (ncu measured FLOPs and bytes), 'time' (the model's FLOPs and bytes over measured time)
or 'predicted' (the model's attainable FLOP/s; drawn hollow, and said so).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from tracker import units
from tracker.figures import PHASE_COLORS, PHASE_MARKERS, PHASE_SHORT, drawing, new_figure
from tracker.model.roofline import ROOF_LEVELS, Roofs

BASIS = {
    "counters": "measured by ncu",
    "time": "model FLOPs and bytes over measured time",
    "predicted": "predicted by the model (hollow)",
}
ROOF_STYLE = {"L1": ("#8172B3", ":"), "L2": ("#937860", "--"), "DRAM": ("#222222", "-")}
LEVEL_FILL = {"DRAM": "full", "compulsory": "full", "L2": "none", "L1": "left"}
LEFT_OUT = "launched nothing, or no FLOPs or bytes counted"  # why a layer phase has no point
FONT = 7.5  # label size in points
SAME_SPOT_PX = 5  # points closer than this share one label


@dataclass
class _Label:
    text: str
    color: str
    at: tuple[float, float]  # the point it names, in data coordinates
    x: float  # and in display pixels
    y: float
    width: float = 0.0
    height: float = 0.0


@drawing
def roofline(
    points: pd.DataFrame, roofs: Roofs | None, title: str, basis: str = "counters", arrows: pd.DataFrame | None = None
):
    """The figure, or None when no point has both an intensity and a rate (nothing to place on log
    axes). ``arrows`` (layer, phase, x0, y0, x1, y1) draws a move per layer phase; its points are
    then the variant's and the baseline is drawn faint at each arrow's tail."""
    from matplotlib.ticker import FuncFormatter

    left_out = [_short(layer, phase) for layer, phase in points.attrs.get("left_out", ())]  # before any copy
    points = _placeable(points)
    if points.empty:
        return None
    fig, ax = new_figure(12, 8)
    fig.subplots_adjust(left=0.11, right=0.98, top=0.91, bottom=0.09)
    xlo, xhi, ylo, yhi = _limits(points, roofs, arrows)
    ax.set(
        xscale="log",
        yscale="log",
        xlim=(xlo, xhi),
        ylim=(ylo, yhi),
        xlabel="arithmetic intensity (FLOP per byte moved at the level)",
        ylabel="FLOP/s",
    )
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: units.axis_tick("flops_per_s", value)))
    ax.set_title(title, fontsize=11, loc="left")
    obstacles, ridges, segments = _draw_roofs(ax, roofs, xlo, xhi) if roofs else ([], [], [])
    _draw_points(ax, points, basis)
    if arrows is not None and not arrows.empty:
        _draw_arrows(ax, arrows)
    legend = _legend(ax, points, roofs, basis, arrows is not None and not arrows.empty)
    obstacles.append(_box(legend.get_window_extent(fig.canvas.get_renderer())))
    unplaced = place_labels(ax, ridges + _labels(ax, points), obstacles, segments)
    notes = [f"not labelled (crowded): {', '.join(unplaced)}"] if unplaced else []
    skipped = sorted(set(points.attrs.get("skipped", ())) | set(left_out))
    if skipped:
        notes.append(f"not shown ({LEFT_OUT}): " + ", ".join(skipped))
    if notes:
        fig.text(0.01, 0.005, "\n".join(notes), fontsize=7, color="grey", va="bottom", wrap=True)
    fig.unplaced = unplaced  # for tests and callers that want to know
    return fig


def _placeable(points: pd.DataFrame) -> pd.DataFrame:
    """Rows log axes can show; the names of the others kept in ``attrs['skipped']``."""
    if points.empty:
        return points
    x, y = points["intensity"].astype(float), points["flops_per_s"].astype(float)
    ok = x.map(math.isfinite) & y.map(math.isfinite) & (x > 0) & (y > 0)
    kept = points[ok].reset_index(drop=True)
    kept.attrs["skipped"] = [
        _short(r.layer, r.phase) for r in points[~ok].drop_duplicates(["layer", "phase"]).itertuples()
    ]
    return kept


def _short(layer: str, phase: str) -> str:
    """'conv1 F': a layer phase as the figure's notes name it."""
    return f"{layer} {PHASE_SHORT.get(phase, phase)}".strip()


def _limits(points, roofs, arrows) -> tuple[float, float, float, float]:
    xs = list(points["intensity"]) + ([roofs.ridge(level) for level in roofs.bandwidth] if roofs else [])
    ys = list(points["flops_per_s"]) + ([roofs.flops_per_s] if roofs else [])
    if arrows is not None and not arrows.empty:
        xs += list(arrows["x0"]) + list(arrows["x1"])
        ys += list(arrows["y0"]) + list(arrows["y1"])
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    ys = [y for y in ys if y > 0 and math.isfinite(y)]
    return min(xs) / 3, max(xs) * 3, min(ys) / 4, max(ys) * 4  # room above the roof for labels


def _draw_roofs(ax, roofs: Roofs, xlo: float, xhi: float) -> tuple[list[tuple], list[_Label], list[tuple]]:
    """Each level's sloped roof up to the compute roof, its ridge marked; the roof labels' boxes,
    the ridge labels (placed later with the points' labels) and the roofs as straight segments on
    screen (a slope is straight on log-log axes), which no point's label may cross."""
    import numpy as np

    x = np.geomspace(xlo, xhi, 256)
    labels = []
    ax.axhline(roofs.flops_per_s, color="black", lw=2, zorder=2, gid="roof")
    segments = [(ax.transData.transform((xlo, roofs.flops_per_s)), ax.transData.transform((xhi, roofs.flops_per_s)))]
    labels.append(
        ax.text(
            xhi / 1.15,
            roofs.flops_per_s * 1.12,
            f"FP32 {units.si(roofs.flops_per_s, 'FLOP/s')} ({roofs.source['FP32']})",
            ha="right",
            va="bottom",
            fontsize=8.5,
            weight="bold",
        )
    )
    ridges = []
    for i, level in enumerate(lv for lv in ROOF_LEVELS if lv in roofs.bandwidth):
        color, dash = ROOF_STYLE[level]
        bandwidth, ridge = roofs.bandwidth[level], roofs.ridge(level)
        slope = x[x <= ridge]
        ax.plot(slope, slope * bandwidth, color=color, ls=dash, lw=1.6, zorder=2, gid="roof")
        segments.append(
            (
                ax.transData.transform((slope[0], slope[0] * bandwidth)),
                ax.transData.transform((ridge, ridge * bandwidth)),
            )
        )
        ax.plot([ridge], [roofs.flops_per_s], marker="|", markersize=14, color=color, zorder=2)
        start = max(xlo * 1.6 * 8**i, ridge / 1e3)  # staggered along x: parallel roofs can lie close
        labels.append(
            ax.text(
                start,
                start * bandwidth * 1.25,
                f"{level} {units.si(bandwidth, 'B/s')} ({roofs.source[level]})",
                color=color,
                fontsize=8,
                rotation=_slope_angle(ax),
                rotation_mode="anchor",
                ha="left",
                va="bottom",
            )
        )
        ridges.append(
            _Label(
                f"ridge {units.number('intensity', ridge)}",
                color,
                (ridge, roofs.flops_per_s),
                *ax.transData.transform((ridge, roofs.flops_per_s)),
            )
        )
    renderer = ax.figure.canvas.get_renderer()
    return [_box(t.get_window_extent(renderer)) for t in labels], ridges, segments


def _slope_angle(ax) -> float:
    """The on-screen angle of a line of slope 1 on these log-log axes."""
    (x0, y0), (x1, y1) = ax.transData.transform([(1, 1), (10, 10)])
    return math.degrees(math.atan2(y1 - y0, x1 - x0))


def _marker(phase: str, level: str, basis: str) -> dict:
    color = PHASE_COLORS.get(phase, "#555555")
    hollow = basis == "predicted" or LEVEL_FILL.get(level) == "none"
    return dict(
        marker=PHASE_MARKERS.get(phase, "D"),
        color=color,
        markersize=6.5,
        linestyle="none",
        markerfacecolor="white" if hollow else color,
        markeredgecolor=color,
        fillstyle=LEVEL_FILL.get(level, "full") if not hollow else "full",
        markeredgewidth=1.2,
    )


def _draw_points(ax, points: pd.DataFrame, basis: str) -> None:
    for (_, phase), rows in points.groupby(["layer", "phase"], sort=False):
        if len(rows) > 1:  # one layer phase at several levels: joined, as in ncu's hierarchical chart
            ordered = rows.sort_values("intensity")
            ax.plot(
                ordered["intensity"],
                ordered["flops_per_s"],
                color=PHASE_COLORS.get(phase, "#555555"),
                lw=0.6,
                alpha=0.5,
                zorder=3,
            )
        for row in rows.itertuples():
            ax.plot([row.intensity], [row.flops_per_s], zorder=4, **_marker(phase, row.level, basis))


def _draw_arrows(ax, arrows: pd.DataFrame) -> None:
    for row in arrows.itertuples():
        color = PHASE_COLORS.get(row.phase, "#555555")
        ax.plot(
            [row.x0],
            [row.y0],
            marker=PHASE_MARKERS.get(row.phase, "D"),
            color=color,
            alpha=0.3,
            markersize=5.5,
            linestyle="none",
            zorder=3,
        )
        ax.annotate(
            "",
            xy=(row.x1, row.y1),
            xytext=(row.x0, row.y0),
            zorder=3,
            arrowprops=dict(arrowstyle="-|>", color=color, lw=1.0, alpha=0.8, shrinkA=2, shrinkB=4),
        )


def _primary(rows: pd.DataFrame) -> pd.Series:
    """The point a layer phase is labelled at: its DRAM (or compulsory) point, else the slowest level's."""
    order = {level: i for i, level in enumerate(("DRAM", "compulsory", "L2", "L1"))}
    return rows.iloc[rows["level"].map(order).fillna(9).argsort().iloc[0]]


def _labels(ax, points: pd.DataFrame) -> list[_Label]:
    """One label per spot: layer phases whose points coincide on screen share it ('relu1 ... relu7 (7) F')."""
    spots: list[tuple[float, float, list]] = []
    for (_, _), rows in points.groupby(["layer", "phase"], sort=False):
        row = _primary(rows)
        x, y = ax.transData.transform((row["intensity"], row["flops_per_s"]))
        for sx, sy, members in spots:
            if abs(sx - x) < SAME_SPOT_PX and abs(sy - y) < SAME_SPOT_PX:
                members.append(row)
                break
        else:
            spots.append((x, y, [row]))
    labels = []
    for x, y, members in spots:
        phases = list(dict.fromkeys(r["phase"] for r in members))
        color = PHASE_COLORS.get(phases[0], "#555555") if len(phases) == 1 else "#333333"
        labels.append(_Label(_text(members), color, (members[0]["intensity"], members[0]["flops_per_s"]), x, y))
    return labels


def _text(members: list) -> str:
    names = list(dict.fromkeys(r["layer"] for r in members))
    phases = "/".join(PHASE_SHORT.get(p, p) for p in dict.fromkeys(r["phase"] for r in members))
    text = ", ".join(names) if len(names) <= 2 else f"{names[0]} ... {names[-1]} ({len(names)})"
    return f"{text} {phases}".strip()


# Where a label may go, nearest first: offsets in pixels from its point (right/left/up/down and the
# diagonals), at growing distance; a label further than the first ring gets a leader line.
_DIRECTIONS = ((1, 0), (1, 1), (1, -1), (-1, 0), (-1, 1), (-1, -1), (0, 1), (0, -1))
_RADII = (5, 12, 22, 34, 50, 70, 95, 125)


def _box(extent) -> tuple[float, float, float, float]:
    return (extent.x0, extent.y0, extent.x1, extent.y1)


def _overlaps(a, b, gap: float = 1.0) -> bool:
    """Whether two boxes come closer than ``gap`` pixels (touching labels read as one)."""
    return a[0] < b[2] + gap and b[0] < a[2] + gap and a[1] < b[3] + gap and b[1] < a[3] + gap


def _crosses(box, segment) -> bool:
    """Whether the segment ((x0, y0), (x1, y1)) passes through the box (x0, y0, x1, y1): clipped
    against the box's slab in x, then in y (Liang-Barsky)."""
    (ax_, ay), (bx, by) = segment
    lo, hi = 0.0, 1.0
    for start, delta, low, high in ((ax_, bx - ax_, box[0], box[2]), (ay, by - ay, box[1], box[3])):
        if delta == 0:
            if not low < start < high:
                return False
            continue
        t0, t1 = sorted(((low - start) / delta, (high - start) / delta))
        lo, hi = max(lo, t0), min(hi, t1)
        if lo >= hi:
            return False
    return True


def place_labels(ax, labels: list[_Label], obstacles: list[tuple], segments: Sequence[tuple] = ()) -> list[str]:
    """Place each label at the nearest offset where it overlaps no other label, no point, no roof
    label and no roof (``segments``), inside the axes; returns the texts that found no place (left
    off, never overlapping)."""
    renderer = ax.figure.canvas.get_renderer()
    frame = _box(ax.get_window_extent(renderer))
    points = [(lb.x - 4, lb.y - 4, lb.x + 4, lb.y + 4) for lb in labels]
    for line in ax.get_lines():  # every marker drawn, labelled or not
        if line.get_marker() not in (None, "None", "") and len(line.get_xdata()) == 1:
            x, y = ax.transData.transform((line.get_xdata()[0], line.get_ydata()[0]))
            half = 9 if line.get_marker() == "|" else 4  # a ridge mark is tall
            points.append((x - 4, y - half, x + 4, y + half))
    taken = list(obstacles) + points
    unplaced = []
    scale = 72 / ax.figure.dpi  # pixels -> points, for the offsets
    for lb in sorted(labels, key=lambda lb: (-lb.y, lb.x)):
        probe = ax.text(0, 0, lb.text, fontsize=FONT)
        extent = probe.get_window_extent(renderer)
        probe.remove()
        lb.width, lb.height = extent.width, extent.height
        spot = _find_spot(lb, taken, frame, segments)
        if spot is None:
            unplaced.append(lb.text)
            continue
        box, (dx, dy), ha, va, radius = spot
        taken.append(box)
        ax.annotate(
            lb.text,
            lb.at,
            xytext=(dx * scale, dy * scale),
            textcoords="offset points",
            ha=ha,
            va=va,
            fontsize=FONT,
            color=lb.color,
            zorder=5,
            bbox=dict(boxstyle="square,pad=0.05", facecolor="white", edgecolor="none", alpha=0.75),
            arrowprops=dict(arrowstyle="-", color="#999999", lw=0.5, shrinkA=0, shrinkB=3)
            if radius > _RADII[1]
            else None,
        )
    return unplaced


def _find_spot(lb: _Label, taken: list[tuple], frame: tuple, segments=()):
    for radius in _RADII:
        for ux, uy in _DIRECTIONS:
            norm = math.hypot(ux, uy)
            dx, dy = radius * ux / norm, radius * uy / norm
            ha = "left" if ux > 0 else "right" if ux < 0 else "center"
            va = "bottom" if uy > 0 else "top" if uy < 0 else "center"
            x0 = lb.x + dx - (0 if ha == "left" else lb.width if ha == "right" else lb.width / 2)
            y0 = lb.y + dy - (0 if va == "bottom" else lb.height if va == "top" else lb.height / 2)
            box = (x0, y0, x0 + lb.width, y0 + lb.height)
            inside = frame[0] <= box[0] and box[2] <= frame[2] and frame[1] <= box[1] and box[3] <= frame[3]
            if (
                inside
                and not any(_overlaps(box, other) for other in taken)
                and not any(_crosses(box, segment) for segment in segments)
            ):
                return box, (dx, dy), ha, va, radius
    return None


def _legend(ax, points: pd.DataFrame, roofs: Roofs | None, basis: str, moves: bool) -> Any:
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], label=f"{phase} ({PHASE_SHORT[phase]})", **_marker(phase, "DRAM", basis))
        for phase in PHASE_COLORS
        if phase in set(points["phase"])
    ]
    levels = [level for level in ("L1", "L2", "DRAM") if level in set(points["level"])]
    if len(levels) > 1:
        handles += [Line2D([], [], label=f"at {level}", **_marker("all", level, basis)) for level in levels]
    if moves:
        handles.append(Line2D([], [], color="#555555", marker=">", label="baseline -> variant"))
    handles.append(Line2D([], [], linestyle="none", label=f"points: {BASIS[basis]}"))
    if roofs is not None and roofs.device:
        handles.append(Line2D([], [], linestyle="none", label=f"roofs: {roofs.device}"))
    return ax.legend(handles=handles, loc="lower right", fontsize=8, framealpha=0.9)


def model_points(rows) -> pd.DataFrame:
    """Points from the model's predictions (tracker.model.Prediction): compulsory intensity, attainable FLOP/s."""
    return pd.DataFrame(
        [
            {
                "layer": r.layer,
                "phase": r.phase,
                "level": "compulsory",
                "intensity": r.intensity,
                "flops_per_s": (r.attainable_gflops or 0) * 1e9 if r.ops else 0.0,
            }
            for r in rows
        ]
    )
