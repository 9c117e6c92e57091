"""The extras: tracker.extras names each of pyproject.toml's, every hint to install something
reads its one install line (so it names the extra that holds the whole capability), the model
backend predicts our networks with PyTorch absent, and the notebooks extra's ``jupyter`` runs a
notebook on a committed recording."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tracker.errors import TrackerError
from tracker.extras import EXTRAS, install
from tracker.gpu.network import algorithms, plan, plan_of
from tracker.model import memory
from tracker.nets import build

ROOT = Path(__file__).resolve().parents[1]


def test_the_table_names_every_extra_a_user_installs():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRAS) == set(extras) - {"test"}
    assert install("compile") == "pip install -e '.[compile]'"
    with pytest.raises(KeyError):
        install("cuda")


def test_no_message_spells_out_its_own_install_line():
    """Every 'pip install' in tracker/ is tracker.extras' one line: a hint that lists packages
    (NVRTC without cuobjdump and nvdisasm) cannot come back."""
    spelled = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in (ROOT / "tracker").rglob("*.py")
        if path.name != "extras.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "pip install" in line
    ]
    assert spelled == []


def _raises(call) -> str:
    with pytest.raises(TrackerError) as raised:
        call()
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_the_compile_hints_name_the_compile_extra(monkeypatch):
    from tracker.gpu import compile as compiled

    monkeypatch.setitem(sys.modules, "cuda.bindings", None)  # import fails as without cuda-bindings
    assert _raises(compiled._nvrtc) == f"the compile check needs NVRTC: {install('compile')}"
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "nvidia", None)
    assert _raises(compiled.cuobjdump) == f"reading the SASS needs cuobjdump: {install('compile')}"


def test_the_gpu_hint_names_the_gpu_extra(monkeypatch):
    import importlib.util

    from tracker import profile
    from tracker.gpu import detect

    monkeypatch.setattr(detect, "cuda_devices", lambda: (1, "1 GPU"))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cupy" else real(name, *a))
    assert _raises(lambda: profile.require_gpu("--backend events")) == f"--backend events needs CuPy: {install('gpu')}"


def test_the_torch_parquet_and_postgres_hints_name_their_extras(monkeypatch, tmp_path):
    from tracker.export import export
    from tracker.library import require_torch
    from tracker.store import open_store

    monkeypatch.setitem(sys.modules, "torch", None)
    assert _raises(lambda: require_torch("--torch")).endswith(
        f"needs PyTorch, which is not installed: {install('torch')}"
    )
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    assert (
        _raises(lambda: export(None, 1, tmp_path, "parquet"))
        == f"parquet needs pyarrow: {install('parquet')} (or --format csv)"
    )
    monkeypatch.setitem(sys.modules, "psycopg", None)
    assert _raises(lambda: open_store("postgresql://u@localhost/traces", write=False)).endswith(
        f"(for PostgreSQL: {install('postgres')})"
    )


HIDE_TORCH = "import sys\nsys.modules['torch'] = None  # import torch fails, find_spec('torch') is None\n"


def _tracker(args: list[str], cwd: Path, hidden: Path) -> subprocess.CompletedProcess:
    """The tracker command in a process where PyTorch cannot be imported (a sitecustomize hides it)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(hidden), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "tracker", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.mark.slow
def test_the_model_backend_predicts_a_torch_arm_without_pytorch(tmp_path):
    """The memory study's torch arm on the model backend is our network predicted: it needs no
    PyTorch; it holds the im2col bound where the ours arm holds its plan's workspace (Winograd
    F(4x4)'s). A user's own model (--torch) does need it."""
    hidden = tmp_path / "hide"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text(HIDE_TORCH)
    done = _tracker(
        ["experiment", "memory", "alexnet", "--batch", "16", "--backend", "model", "--format", "csv"], tmp_path, hidden
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split(",") for line in done.stdout.splitlines()]
    peak = rows[0].index("predicted_peak_bytes")
    net = build("alexnet")
    planned = algorithms(net, plan_of(plan(net, {}, batch=16, by_rule=True)), 16)
    assert [(row[0], int(row[peak])) for row in rows[1:]] == [
        ("ours", memory(net, 16, 32, planned).peak_bytes),
        ("torch", memory(net, 16).peak_bytes),
    ]
    refused = _tracker(["profile", "--torch", "mymodels:build", "--backend", "model"], tmp_path, hidden)
    assert refused.returncode == 1
    assert refused.stderr.strip() == f"Error: --torch needs PyTorch, which is not installed: {install('torch')}"


@pytest.mark.slow
def test_the_notebooks_extra_runs_a_notebook_with_jupyter(tmp_path):
    """The extra's own entry point: ``jupyter nbconvert --execute`` from this environment's bin/
    runs the overview notebook on the committed H100 recording (a copy), with no error."""
    from recorded import B16, recording

    jupyter = Path(sys.executable).parent / "jupyter"
    assert jupyter.exists(), f"no jupyter beside {sys.executable}: {install('notebooks')}"
    db = recording(B16, tmp_path)
    env = {**os.environ, "TRACKER_DB": db, "IPYTHONDIR": str(tmp_path / "ipython"), "JUPYTER_PLATFORM_DIRS": "1"}
    env.pop("TRACKER_RUN", None)
    done = subprocess.run(
        [
            str(jupyter),
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            "--output-dir",
            str(tmp_path),
            str(ROOT / "notebooks" / "overview.ipynb"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ran = (tmp_path / "overview.ipynb").read_text()
    assert '"output_type": "error"' not in ran and re.search(r'"image/png": "iVBORw0KGgo', ran)
