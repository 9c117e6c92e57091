"""tools/gpu_stage.sh on a machine without a GPU: every stage stops at once with a one-line
reason, a summary and a non-zero exit, and leaves at most the two files the device tool can
bring back (it returns at most 8 from $OUT)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tracker.gpu.detect import cuda_devices

ROOT = Path(__file__).resolve().parents[1]


def stage(arg: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "tools/gpu_stage.sh", arg],
        cwd=ROOT,
        env={**os.environ, "OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.skipif(cuda_devices()[0] > 0, reason="this machine has a GPU: the stage would run")
@pytest.mark.parametrize("number", ["1", "2", "3", "12"])
def test_every_stage_refuses_cleanly_without_a_gpu(number, tmp_path):
    done = stage(number, tmp_path)
    assert done.returncode == 1
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert files == sorted(["summary.txt", f"stage{number}.tar.gz"])
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert summary[1].startswith("preflight") and " rc=1 " in summary[1] and "FAIL GPU:" in summary[1]
    assert summary[-1].startswith(f"stage {number} stopped: preflight failed")
    with tarfile.open(tmp_path / f"stage{number}.tar.gz") as tar:
        assert f"stage{number}/preflight.log" in tar.getnames()


def test_an_unknown_stage_is_a_usage_error(tmp_path):
    done = stage("13", tmp_path)
    assert done.returncode == 2
    assert (tmp_path / "summary.txt").read_text() == "usage: tools/gpu_stage.sh 1|2|...|12|suite (got '13')\n"


def test_ci_runs_the_readmes_test_command_in_a_new_virtual_environment():
    """What the README tells a new user to run is what CI runs, in a venv it creates (a package
    installed on the CI machine by hand can never make CI green), with the pinned constraints."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    readme = (ROOT / "README.md").read_text()
    command = ci[-1]
    assert command.startswith(
        "python -m pip install -c constraints.txt -e '.[test]' && python -m ruff check && python -m ruff format --check"
        " && python -m pytest"
    )
    assert f"```sh\n{command}\n```" in readme
    assert any(line.startswith('python3 -m venv "$VENV"') for line in ci)
    assert any(line.startswith('. "$VENV/bin/activate"') for line in ci)
    assert "python -m pip install -c constraints.txt -e . && tracker profile alexnet --batch 128" in readme


def test_the_constraints_pin_every_package_the_extras_name():
    """Each dependency pyproject names (core and extras) has one exact pin in constraints.txt."""
    import re
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    named = [*project["dependencies"], *(d for extra in project["optional-dependencies"].values() for d in extra)]
    names = {re.split(r"[\[<>=~! ]", d, maxsplit=1)[0].lower().replace("_", "-") for d in named} - {
        "tracker",
        "cupy-cuda13x",
    }
    pins = dict(
        line.lower().replace("_", "-").split("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert names <= set(pins), names - set(pins)


STAND_IN_CUPY = '''
import hashlib, json, os

class RawModule:
    """CuPy's, as far as tools/gpu_warm.py uses it: compile() keeps what it was given."""
    def __init__(self, code, options=()):
        self.code, self.options = code, tuple(options)

    def compile(self):
        key = hashlib.sha256(repr((self.code, self.options)).encode()).hexdigest()
        with open(os.path.join(os.environ["COMPILED"], key), "w") as kept:
            json.dump([self.code, list(self.options), os.getppid()], kept)
'''


def test_the_warm_compiles_every_module_the_backend_would_in_processes_of_its_own(tmp_path):
    """tools/gpu_warm.py fills CuPy's cache with exactly the modules, texts and options that
    CupyBackend.module asks CuPy for, each build's, in worker processes (a stand-in CuPy here)."""
    from tracker.gpu.kernels import BUILDS, compile_options, modules, source_text

    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(STAND_IN_CUPY)
    compiled = tmp_path / "compiled"
    compiled.mkdir()
    env = {**os.environ, "COMPILED": str(compiled), "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    warm = subprocess.Popen(
        [sys.executable, "tools/gpu_warm.py"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = warm.communicate(timeout=300)
    assert warm.returncode == 0, err
    kept = [json.loads(path.read_text()) for path in compiled.iterdir()]
    expected = {
        (source_text(source, defines), compile_options(build, overrides=defines))
        for build in BUILDS
        for source, defines in modules()
    }
    assert {(code, tuple(options)) for code, options, _ in kept} == expected
    assert {parent for _, _, parent in kept} == {warm.pid}  # compiled by its workers, not by the warm itself
    assert out.startswith(f"{len(expected)} kernel modules")
