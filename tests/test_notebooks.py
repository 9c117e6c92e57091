"""Every notebook's code runs, top to bottom, against a real (model-backend) trace database."""

import json
from pathlib import Path

import pytest

from tracker.model import lookup
from tracker.nets import build
from tracker.profile import profile

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path, monkeypatch):
    db = str(tmp_path / "trace.db")
    profile(db, build("alexnet"), 128, backend="model", device=lookup("h100"))
    monkeypatch.setenv("TRACKER_DB", db)
    namespace: dict = {}
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), f"{path.name}", "exec"), namespace)
    assert len(namespace["layers"]) == 49
    assert namespace["share"]["ops"].sum() == pytest.approx(1.0, abs=1e-3)  # shares rounded to 4 places
