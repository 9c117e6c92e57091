"""No legend covers data, no text covers another, no point's label sits on a roof: every figure of
the reports a user opens first, drawn from the committed recordings (legends covered
the cache-hit-rate and traffic bars, and point labels crossed the roofs). Measured on the canvas
by tests/figure_layout.py."""

from __future__ import annotations

import pytest
from figure_layout import problems
from recorded import B16, CORE_EXPERIMENTS, recording

pytestmark = pytest.mark.slow  # draws some 25 figures


@pytest.mark.parametrize("name, targets", [(B16, ["1"]), (CORE_EXPERIMENTS, ["e1", "e2", "e3", "e4"])])
def test_nothing_in_a_figure_covers_what_it_shows(name, targets, tmp_path):
    from tracker.report import build
    from tracker.store import open_store

    store = open_store(recording(name, tmp_path), write=False)
    drawn = {
        (target, s.key): problems(s.figure)
        for target in targets
        for s in build(store, target).sections
        if s.figure is not None
    }
    assert drawn
    assert {key: found for key, found in drawn.items() if found} == {}


def test_a_model_runs_figures_too(tmp_path):
    """The first command's report without a GPU (the model on a catalog device), for a 3-D U-Net's
    176 layer phases."""
    from tracker.model import lookup
    from tracker.nets import build as build_net
    from tracker.profile import profile
    from tracker.report import build
    from tracker.store import open_store

    db = str(tmp_path / "t.db")
    profile(db, build_net("unet3d"), 1, backend="model", device=lookup("h100"))
    drawn = {s.key: problems(s.figure) for s in build(open_store(db, write=False), "1").sections if s.figure}
    assert "roofline" in drawn and {key: found for key, found in drawn.items() if found} == {}
