"""The device contract (tracker/ops/contract.py) on the CPU emulation: it refuses every call of
tests/contract_cases.py as the CuPy backend does (tests/test_gpu_contract.py on a GPU), its device
arrays are a type of their own, and the sizes the CuPy backend checks constants against are the
compiler's."""

import numpy as np
import pytest
from contract_cases import CASES, assert_a_valid_launch_runs, assert_refused

from tracker.gpu.kernels import constant_bytes, sources
from tracker.ops.contract import RULES


def test_every_rule_has_a_call_that_breaks_it():
    assert {rule for rule, _ in CASES.values()} == set(RULES)


@pytest.mark.parametrize("name", CASES)
def test_the_emulation_refuses_what_the_gpu_refuses_before_launching(emulator, name):
    assert_refused(emulator, name)


def test_a_valid_launch_and_a_constant_run(emulator):
    assert_a_valid_launch_runs(emulator)


def test_device_arrays_are_made_only_by_the_backend_and_never_taken_for_host_arrays(emulator):
    from emu.emulator import DeviceArray

    device = emulator.asarray(np.ones(4, np.float32))
    with pytest.raises(TypeError, match="only the Emulator"):
        DeviceArray(np.ones(4, np.float32), object())
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(device)
    with pytest.raises(TypeError):
        np.ones(4, np.float32) + device
    with pytest.raises(TypeError, match="host array"):
        device[:] = np.zeros(4, np.float32)
    assert emulator.asarray(np.zeros(4)).dtype == np.float64  # kept, as CuPy keeps it
    assert emulator.asarray(device) is device


def test_a_view_shares_its_device_memory(emulator):
    device = emulator.asarray(np.zeros((2, 4), np.float32))
    device[1].fill(3.0)
    assert emulator.asnumpy(device).tolist() == [[0.0] * 4, [3.0] * 4]


@pytest.mark.parametrize("source", [s for s in sources() if constant_bytes(s)])
def test_the_constant_sizes_the_cupy_backend_checks_are_the_compilers(emulator, source):
    assert {symbol: emulator.symbol_bytes(source, symbol) for symbol in constant_bytes(source)} == constant_bytes(
        source
    )
