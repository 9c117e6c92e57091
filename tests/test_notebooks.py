"""Every notebook runs top to bottom against a trace database: the labelled sample store
(test_views.sample_store: public K20c counters on AlexNet layers), model runs of AlexNet and a
model-backend batch experiment. No GPU recording of ours exists yet to run them on."""

import json
from pathlib import Path

import pytest
from test_views import sample_store

from tracker.experiment import run_experiment
from tracker.model import lookup
from tracker.nets import build
from tracker.profile import profile

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("notebooks") / "trace.db")
    sample_store(path)  # run 1
    run_experiment(path, "batch", build("alexnet"), 16, batches=(16, 128), backend="model",
                   device=lookup("h100"))  # runs 2, 3
    profile(path, build("alexnet"), 128, backend="model", device=lookup("h100"))  # run 4
    return path


def run_notebook(path: Path) -> dict:
    namespace: dict = {}
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), path.name, "exec"), namespace)
    return namespace


def test_the_notebooks_are_these():
    assert [p.stem for p in NOTEBOOKS] == ["experiments", "overview", "stalls_caches"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, db, monkeypatch):
    monkeypatch.setenv("TRACKER_DB", db)
    for name in ("TRACKER_RUN", "TRACKER_EXPERIMENT"):
        monkeypatch.delenv(name, raising=False)
    ns = run_notebook(path)
    if path.stem == "overview":  # the newest run: the model's AlexNet on an H100
        assert ns["run_id"] == 4 and len(ns["times"]) == 49
        assert ns["share"].sum() == pytest.approx(1.0)
        assert ns["whole"]["ms"] == pytest.approx(ns["times"]["predicted_ms"].sum())
    elif path.stem == "stalls_caches":  # the newest run with counters: the sample
        assert ns["run_id"] == 1 and set(ns["shares"].layer) == {"conv1", "relu1", "lrn1", "pool1"}
    else:
        assert ns["experiment"].kind == "batch" and list(ns["arms"].run_id) == [2, 3]
        assert set(ns["results"].batch) == {16, 128}
