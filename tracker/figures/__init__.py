"""Every figure tracker draws: the roofline (``tracker model --plot``, the report, notebooks) and
the per-layer bars of the report, in one style.

Drawing uses matplotlib's object interface (``Figure``, never ``pyplot``) inside a style context,
so importing or drawing never switches a notebook's backend or changes its rcParams. One colour
and one marker per phase, the same in every figure. matplotlib is imported only when drawing.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

from tracker.phases import PHASES

PHASE_COLORS = {"fwd": "#4C72B0", "bwd_data": "#DD8452", "bwd_weight": "#55A868", "all": "#555555"}
PHASE_MARKERS = {"fwd": "o", "bwd_data": "s", "bwd_weight": "^", "all": "D"}
PHASE_SHORT = {"fwd": "F", "bwd_data": "Bd", "bwd_weight": "Bw", "all": ""}
assert set(PHASES) <= set(PHASE_COLORS)  # a phase added to the model needs a colour here


def style() -> contextlib.AbstractContextManager:
    """seaborn's whitegrid look for the figures drawn inside, and nothing outside."""
    import matplotlib
    import seaborn as sns

    return matplotlib.rc_context(
        {**sns.axes_style("whitegrid"), **sns.plotting_context("notebook"), "svg.fonttype": "none", "savefig.dpi": 110}
    )


def drawing(function):
    """Run a figure function inside :func:`style`."""

    @functools.wraps(function)
    def inside(*args, **kwargs):
        with style():
            return function(*args, **kwargs)

    return inside


def new_figure(width: float, height: float, ncols: int = 1, **kwargs):
    """A detached Figure (no pyplot, no backend) with an Agg canvas, so text can be measured; with
    ``ncols`` 0 no axes (the caller lays them out)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    if ncols == 0:
        return fig, None
    axes = fig.subplots(1, ncols, squeeze=False, **kwargs)[0]
    return fig, (axes[0] if ncols == 1 else axes)


def save(fig, path: str | Path) -> None:
    """Write ``fig`` in the format its suffix names."""
    with style():
        fig.savefig(path)


def label(layer: str, phase: str) -> str:
    """'conv2 Bw'."""
    return f"{layer} {PHASE_SHORT.get(phase, phase)}".strip()
