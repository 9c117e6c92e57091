"""On a GPU: the CuPy backend refuses every call of tests/contract_cases.py under the same rule as
the CPU emulation (tests/test_contract.py), before CuPy sees it, and runs a valid launch."""

import pytest
from contract_cases import CASES, assert_a_valid_launch_runs, assert_refused

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cupy_backend():
    from tracker.gpu.cupy_backend import CupyBackend

    return CupyBackend("ca")


@pytest.mark.parametrize("name", CASES)
def test_the_cupy_backend_refuses_what_the_emulation_refuses(cupy_backend, name):
    assert_refused(cupy_backend, name)


def test_a_valid_launch_and_a_constant_run_on_the_gpu(cupy_backend):
    assert_a_valid_launch_runs(cupy_backend)


def test_compile_ahead_fills_the_cache_the_backends_compile_reads(tmp_path, monkeypatch):
    """tools/gpu_warm.py, the suite stage's first step: each module compiled in a process of its own
    into CuPy's on-disk cache, under the key the backend's own compile finds: a fresh process then
    compiles nothing (the cache folder is unchanged)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tracker.gpu.cupy_backend import compile_ahead

    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path))  # read by the processes started below
    compile_ahead([("relu.cu", (), "ca"), ("relu.cu", (), "cg")], workers=2)
    kept = sorted(path.name for path in tmp_path.iterdir())
    assert len(kept) >= 2, kept  # a binary per L1 build
    again = "from tracker.gpu.cupy_backend import raw_module; raw_module('relu.cu', (), 'cg').compile()"
    subprocess.run(
        [sys.executable, "-c", again], check=True, env=os.environ, cwd=Path(__file__).parents[1], timeout=120
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == kept
