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
