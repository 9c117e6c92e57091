"""Every notebook runs top to bottom as a user runs it: through a Jupyter kernel (nbclient and
ipykernel's python3 kernel on this interpreter), with TRACKER_DB and the other variables reaching
the kernel through the environment. No cell errs, every figure shows inline as a PNG, and the
values the kernel ends with are checked. The stores: the labelled sample store
(samples.sample_store: public K20c counters on AlexNet layers), model runs of AlexNet and a
model-backend batch experiment; and the H100 recordings (tests/data/RECORDINGS.md): the ncu run at
batch 16, and the fusion experiment of the GEMM core. A store that lacks what a notebook
needs stops it at its first code cell with a one-line error."""

from __future__ import annotations

import os
import pickle
import re
import sys
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner
from recorded import B16, B128_NCU, CORE_EXPERIMENTS, DATA, LAYER_PHASES, recording
from samples import sample_store

from tracker import report
from tracker.cli import cli
from tracker.experiment import run_experiment
from tracker.model import lookup
from tracker.nets import build
from tracker.profile import profile
from tracker.store import open_store

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))
VALUES = {
    "overview": ("run_id", "times", "share", "whole", "peak"),
    "stalls_caches": ("run_id", "shares"),
    "experiments": ("experiment", "arms", "results"),
}  # what a run reads back from the kernel
CELL_TIMEOUT_S = 120
VARIABLES = ("TRACKER_DB", "TRACKER_RUN", "TRACKER_EXPERIMENT")


def notebook(name: str, out: Path) -> nbformat.NotebookNode:
    """The notebook in memory, plus a last cell that pickles the values VALUES names, and the
    kernel's interpreter, to ``out``."""
    nb = nbformat.read(Path(__file__).parents[1] / "notebooks" / f"{name}.ipynb", as_version=4)
    nb.cells.append(
        nbformat.v4.new_code_cell(
            f"import pickle, sys\nwith open({str(out)!r}, 'wb') as f:\n"
            f"    pickle.dump({{'executable': sys.executable, **{{n: globals()[n] for n in {VALUES[name]!r}}}}}, f)"
        )
    )
    return nb


def execute(nb: nbformat.NotebookNode, folder: Path) -> None:
    """Run ``nb`` in place as Jupyter does, in a kernel started in ``folder``; a cell that raises
    stops the run, as Run All does, with CellExecutionError (its ename and evalue are the error's).
    The kernel is ipykernel's own python3 on sys.executable, whatever kernelspecs this machine has
    installed (``kernel_dirs=[]``), with this process's environment and its own IPython directory
    (no profile or startup file of the machine)."""
    from jupyter_client import AsyncKernelManager
    from jupyter_client.kernelspec import KernelSpecManager
    from nbclient import NotebookClient

    manager = AsyncKernelManager(kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[]))
    manager.connection_file = str(folder / "kernel.json")
    client = NotebookClient(
        nb, km=manager, timeout=CELL_TIMEOUT_S, startup_timeout=60, resources={"metadata": {"path": str(folder)}}
    )
    client.execute(env={**os.environ, "IPYTHONDIR": str(folder / "ipython")})


def values(out: Path) -> dict:
    """What the last cell pickled, once it is checked that the kernel ran on this interpreter."""
    found = pickle.loads(out.read_bytes())
    assert found.pop("executable") == sys.executable
    return found


def outputs(nb: nbformat.NotebookNode, kind: str) -> list:
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs if o.output_type == kind]


def images(nb: nbformat.NotebookNode) -> int:
    """Figures shown inline: display_data outputs holding a PNG."""
    shown = [o for o in outputs(nb, "display_data") if "image/png" in o.data]
    assert all(o.data["image/png"].startswith("iVBORw0KGgo") for o in shown)  # base64 of the PNG signature
    return len(shown)


def run(name: str, db: str, folder: Path, monkeypatch, **variables) -> tuple[nbformat.NotebookNode, dict]:
    """Run a notebook on ``db`` with ``variables`` set (the others unset); check that no cell
    erred or wrote to stderr and that it ran in this interpreter. The notebook and its values."""
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("TRACKER_DB", db)
    for variable, value in variables.items():
        monkeypatch.setenv(variable, value)
    out = folder / "values.pickle"
    nb = notebook(name, out)
    execute(nb, folder)
    nb.cells.pop()
    assert outputs(nb, "error") == []
    assert [o.text for o in outputs(nb, "stream") if o.name == "stderr"] == []
    return nb, values(out)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("notebooks") / "trace.db")
    sample_store(path)  # run 1
    run_experiment(
        path, "batch", build("alexnet"), 16, batches=(16, 128), backend="model", device=lookup("h100")
    )  # runs 2, 3
    profile(path, build("alexnet"), 128, backend="model", device=lookup("h100"))  # run 4
    return path


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("recordings")


def test_the_notebooks_are_these():
    assert [p.stem for p in NOTEBOOKS] == sorted(VALUES)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_notebook_is_clean_and_opens_with_what_it_needs(path):
    """Committed without outputs; a first markdown cell naming what the notebook needs and every
    variable its code reads; no backend forced, and every figure one of tracker.figures."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and "**Needs**" in first.source
    read = set(re.findall(r"TRACKER_[A-Z]+", "".join(cell.source for cell in code)))
    assert read and read <= set(re.findall(r"TRACKER_[A-Z]+", first.source))
    forced = r"matplotlib\.use|import matplotlib\.pyplot|seaborn|\.plot\("  # a backend; figures of pyplot
    assert not any(re.search(forced, cell.source) for cell in code)


@pytest.mark.slow
def test_overview_on_model_runs(db, tmp_path, monkeypatch):
    """The newest run: the model's AlexNet on an H100. Time per layer and the roofline."""
    nb, ns = run("overview", db, tmp_path, monkeypatch)
    assert images(nb) == 2
    assert ns["run_id"] == 4 and len(ns["times"]) == LAYER_PHASES
    assert ns["share"].sum() == pytest.approx(1.0)
    assert ns["whole"]["source"] == "model"
    assert ns["whole"]["ms"] == pytest.approx(ns["times"]["predicted_ms"].sum())


@pytest.mark.slow
def test_overview_on_the_h100_recording(tmp_path, monkeypatch):
    """Batch 16 under ncu: measured times, and the roofline of ncu's FLOPs and bytes per level, from
    the recording as committed (at the current schema: tests/data/RECORDINGS.md), left unchanged."""
    committed = DATA / B16
    before = committed.read_bytes()
    nb, ns = run("overview", str(committed), tmp_path, monkeypatch)
    assert committed.read_bytes() == before and not list(DATA.glob(B16 + "-*"))  # no -wal, no -shm
    assert images(nb) == 2
    assert ns["run_id"] == 1 and len(ns["times"]) == LAYER_PHASES
    assert ns["share"].sum() == pytest.approx(1.0)
    assert ns["whole"]["source"] == "measured"
    assert ns["whole"]["ms"] == pytest.approx(ns["times"]["ms"].sum())


@pytest.mark.slow
def test_overview_on_an_imported_pytorch_trace(tmp_path, monkeypatch):
    """The public A100 AlexNet trace, imported onto tracker's AlexNet: its measured times, each
    layer phase's share, and the whole forward, as `tracker show` and the report read them."""
    from tracker.analysis import runtime
    from tracker.importers import import_file

    db = str(tmp_path / "trace.db")
    run_id = import_file(db, DATA / "public" / "pytorch-alexnet-fwd-a100-kineto.json.gz", build("alexnet"), batch=128)
    nb, ns = run("overview", db, tmp_path, monkeypatch)
    assert ns["run_id"] == run_id and images(nb) >= 1
    assert ns["whole"]["source"] == "measured"
    assert ns["whole"]["ms"] == pytest.approx(runtime.iteration(open_store(db, write=False), run_id)["ms"])


PEAKS = {
    B128_NCU: "the model's 1.86 GB; measured 2.54 GB (1.36x the model)",  # the model of 2026-11-22
    B16: "the model's 676 MB; measured 754 MB (1.12x the model)",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PEAKS))
def test_show_the_report_and_the_overview_agree_on_the_peak(name, recordings, tmp_path, monkeypatch):
    """One number per fact: the model's peak memory and its ratio to the measured, as the run
    recorded them, read the same by show, the report's memory section and the overview notebook."""
    db = recording(name, recordings)
    nb, ns = run("overview", db, tmp_path, monkeypatch)
    assert ns["peak"].line() == PEAKS[name]
    assert f"peak memory: {PEAKS[name]}\n" in [o.text for o in outputs(nb, "stream")]
    shown = CliRunner().invoke(cli, ["show", "1", "--db", db])
    assert shown.exit_code == 0 and f"peak_memory: {PEAKS[name]}\n" in shown.output
    section = next(s for s in report.build(open_store(db, write=False), "1").sections if s.key == "memory")
    assert section.finding == PEAKS[name]


@pytest.mark.slow
def test_stalls_caches_on_the_sample(db, tmp_path, monkeypatch):
    """The newest run with counters: the sample (run 1, not the newer model run 4). nvprof's K20c
    counters have stalls and traffic but no hit rates: two figures."""
    nb, ns = run("stalls_caches", db, tmp_path, monkeypatch)
    assert images(nb) == 2
    assert ns["run_id"] == 1 and set(ns["shares"].layer) == {"conv1", "relu1", "lrn1", "pool1"}


@pytest.mark.slow
def test_stalls_caches_on_the_h100_recording(recordings, tmp_path, monkeypatch):
    """Every AlexNet layer: the stall breakdown, the hit rates and the traffic per level."""
    nb, ns = run("stalls_caches", recording(B16, recordings), tmp_path, monkeypatch)
    assert images(nb) == 3
    assert ns["run_id"] == 1 and len(set(ns["shares"].layer)) == 21
    assert ns["shares"].groupby(["layer", "phase"])["share"].sum().round(6).eq(1).all()


@pytest.mark.slow
def test_experiments_on_the_model_batch_experiment(db, tmp_path, monkeypatch):
    """The newest experiment: batch 16 and 128 on the model. One figure: time per image per batch."""
    nb, ns = run("experiments", db, tmp_path, monkeypatch)
    assert images(nb) == 1
    assert ns["experiment"].kind == "batch" and list(ns["arms"].run_id) == [2, 3]
    assert set(ns["results"].batch) == {16, 128}


@pytest.mark.slow
def test_experiments_on_the_h100_fusion_experiment(recordings, tmp_path, monkeypatch):
    """TRACKER_EXPERIMENT=e2 of the core: speedups per fused pair and per layer. The fused
    iteration runs at 0.68x (test_recordings)."""
    nb, ns = run("experiments", recording(CORE_EXPERIMENTS, recordings), tmp_path, monkeypatch, TRACKER_EXPERIMENT="e2")
    assert images(nb) == 2
    assert ns["experiment"].kind == "fusion" and list(ns["arms"].arm) == ["separate", "fused"]
    whole = ns["results"].set_index("layer").loc["iteration"]
    assert whole["speedup"] == pytest.approx(41.656 / 61.543, rel=1e-3)


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> str:
    """A store with one run of the model without a device: no times, no counters, no experiment."""
    path = str(tmp_path_factory.mktemp("bare") / "trace.db")
    profile(path, build("alexnet"), 16, backend="model")
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, error",
    [
        pytest.param(
            "overview",
            "TrackerError: run 1 in {where} has no times (a model run without a device): "
            "profile with --device NAME, or on a GPU",
            id="overview",
        ),
        pytest.param(
            "stalls_caches",
            "TrackerError: no run with counters in {where}: run tracker profile on a GPU "
            "with Nsight Compute (--backend ncu)",
            id="stalls_caches",
        ),
        pytest.param("experiments", "StoreError: {where} holds no experiments yet", id="experiments"),
    ],
)
def test_a_store_without_what_the_notebook_needs_stops_it_in_one_line(name, error, bare, tmp_path, monkeypatch):
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setenv("TRACKER_DB", bare)
    for variable in ("TRACKER_RUN", "TRACKER_EXPERIMENT"):
        monkeypatch.delenv(variable, raising=False)
    nb = notebook(name, tmp_path / "values.pickle")
    with pytest.raises(CellExecutionError) as stopped:
        execute(nb, tmp_path)
    assert f"{stopped.value.ename}: {stopped.value.evalue}" == error.format(where=open_store(bare, write=False).where)
    first = next(i for i, cell in enumerate(nb.cells) if cell.cell_type == "code")
    assert [o.output_type for o in nb.cells[first].outputs] == ["error"]
    assert all(not cell.get("outputs") for cell in nb.cells[first + 1 :])  # Run All stops there
