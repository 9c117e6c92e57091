"""What a reader sees of a drawn figure, measured on its canvas: where each legend, text and piece
of data lies on screen, and what covers what (tests/test_figure_layout.py).

Texts are measured as their glyph boxes, rotated with the text (a roof's label runs along its
roof), without the leader line or the backing box an annotation may carry."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

MARKER_PX = 3  # half the side of a point marker's box


@dataclass(frozen=True)
class Shape:
    """A text's glyph box on screen: its lower-left corner, size and rotation (degrees)."""

    x: float
    y: float
    width: float
    height: float
    angle: float

    def holds(self, px: float, py: float, margin: float = 0.5) -> bool:
        c, s = math.cos(math.radians(self.angle)), math.sin(math.radians(self.angle))
        u, v = (px - self.x) * c + (py - self.y) * s, -(px - self.x) * s + (py - self.y) * c
        return margin < u < self.width - margin and margin < v < self.height - margin

    def outline(self, step: float = 2.0) -> list[tuple[float, float]]:
        """Points along the box's edges and through its middle, on screen."""
        c, s = math.cos(math.radians(self.angle)), math.sin(math.radians(self.angle))
        us = np.linspace(0, self.width, max(2, int(self.width / step)))
        vs = np.linspace(0, self.height, max(2, int(self.height / step)))
        grid = [(u, v) for u in us for v in (0, self.height / 2, self.height)] + [
            (u, v) for v in vs for u in (0, self.width)
        ]
        return [(self.x + u * c - v * s, self.y + u * s + v * c) for u, v in grid]

    def overlaps(self, other: Shape) -> bool:
        return any(other.holds(*p) for p in self.outline()) or any(self.holds(*p) for p in other.outline())


def shape(text, renderer) -> Shape:
    from matplotlib.text import Text

    angle = text.get_rotation()
    text.set_rotation(0)
    box = Text.get_window_extent(text, renderer)  # the glyphs alone, not an annotation's arrow or patch
    text.set_rotation(angle)
    if angle % 360 == 0:
        return Shape(box.x0, box.y0, box.width, box.height, 0.0)
    return Shape(*_anchor(text, renderer, box), box.width, box.height, angle)


def _anchor(text, renderer, box) -> tuple[float, float]:
    """The lower-left corner a rotated text turns about: its anchor point, for the left/bottom
    anchored roof labels (rotation_mode 'anchor'); the box's own corner otherwise."""
    if text.get_rotation_mode() == "anchor" and text.get_ha() == "left" and text.get_va() == "bottom":
        return tuple(text.get_transform().transform(text.get_position()))
    return box.x0, box.y0


def data_boxes(fig, renderer) -> list[tuple[str, tuple[float, float, float, float]]]:
    """Every bar and point marker of every axes, as screen boxes (x0, y0, x1, y1)."""
    found = []
    for ax in fig.axes:
        for patch in ax.patches:
            e = patch.get_window_extent(renderer)
            if e.width > 0.5 and e.height > 0.5:
                found.append(("bar", (e.x0, e.y0, e.x1, e.y1)))
        for line in ax.get_lines():
            if line.get_marker() in (None, "None", "") or not len(line.get_xydata()):
                continue
            for x, y in ax.transData.transform(line.get_xydata()):
                found.append(("marker", (x - MARKER_PX, y - MARKER_PX, x + MARKER_PX, y + MARKER_PX)))
    return found


def roof_points(ax, step: float = 2.0) -> list[tuple[float, float]]:
    """Points every ``step`` pixels along the roofs drawn (lines with gid 'roof')."""
    points = []
    for line in ax.get_lines():
        if line.get_gid() != "roof":
            continue
        screen = line.get_transform().transform(line.get_xydata())  # a slope's data, or axhline's axes-blended
        for (x0, y0), (x1, y1) in zip(screen[:-1], screen[1:]):
            n = max(2, int(math.hypot(x1 - x0, y1 - y0) / step))
            points += [(x0 + t * (x1 - x0), y0 + t * (y1 - y0)) for t in np.linspace(0, 1, n)]
    return points


def problems(fig) -> list[str]:
    """What covers what: a legend over a bar or point (of any panel), a text over another text, a
    point's label on a roof."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    data = data_boxes(fig, renderer)
    found = []
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            e = legend.get_window_extent(renderer)
            covered = [kind for kind, (x0, y0, x1, y1) in data if x0 < e.x1 and e.x0 < x1 and y0 < e.y1 and e.y0 < y1]
            if covered:
                found.append(f"the legend of '{ax.get_title()[:30]}' covers {len(covered)} {sorted(set(covered))}")
        texts = [(t.get_text(), shape(t, renderer)) for t in ax.texts if t.get_visible() and t.get_text().strip()]
        for (a, sa), (b, sb) in itertools.combinations(texts, 2):
            if sa.overlaps(sb):
                found.append(f"'{a}' over '{b}'")
        roofs = roof_points(ax)
        for a, sa in texts:
            if sa.angle == 0 and any(sa.holds(*p) for p in roofs):  # a roof's own label runs beside it
                found.append(f"'{a}' on a roof")
    return found
