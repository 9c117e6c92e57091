"""On a GPU: the CuPy backend refuses every call of tests/contract_cases.py under the same rule as
the CPU emulation (tests/test_contract.py), before CuPy sees it, and runs a valid launch."""

import numpy as np
import pytest
from contract_cases import CASES, N, relu

from tracker.ops.contract import Refused

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cupy_backend():
    from tracker.gpu.cupy_backend import CupyBackend

    return CupyBackend("ca")


@pytest.mark.parametrize("name", CASES)
def test_the_cupy_backend_refuses_what_the_emulation_refuses(cupy_backend, name):
    rule, call = CASES[name]
    cupy_backend.log.clear()
    with pytest.raises(Refused) as refused:
        call(cupy_backend)
    assert refused.value.rule == rule
    assert cupy_backend.log == []


def test_a_valid_launch_and_a_constant_run_on_the_gpu(cupy_backend):
    from tracker.ops.fft import TWIDDLES

    y = cupy_backend.empty((N,))
    relu(cupy_backend, y=y)
    cupy_backend.to_constant("fft.cu", "c_twiddle", cupy_backend.asarray(TWIDDLES))
    cupy_backend.synchronize()
    np.testing.assert_array_equal(cupy_backend.asnumpy(y), np.maximum(np.linspace(-1, 1, N, dtype=np.float32), 0))
