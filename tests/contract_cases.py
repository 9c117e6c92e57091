"""One call per rule of the device contract (tracker/ops/contract.py) that the GPU would refuse or
get wrong. tests/test_contract.py runs each on the CPU emulation and tests/test_gpu_contract.py on
the CuPy backend: both must refuse every one, under the same rule, before anything launches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tracker.ops.contract import Refused
from tracker.ops.fft import TWIDDLES
from tracker.ops.gemm import Gemm

N = 1024  # elements of the ReLU the launch cases run


def relu(
    b: Any, x: Any = None, y: Any = None, n: Any = N, grid: tuple = (4,), block: tuple = (256,), shared: int = 0
) -> None:
    """relu_fwd_global over N elements: valid as called with no arguments."""
    x = b.asarray(np.linspace(-1, 1, N, dtype=np.float32)) if x is None else x
    b.launch("relu.cu", "relu_fwd_global", grid, block, (x, b.empty((N,)) if y is None else y, n), shared_bytes=shared)


def _gemm_with_a_host_operand(b: Any) -> None:
    a = np.ones((64, 64), np.float32)
    Gemm("gemm_nn", 64, 64, 64, 64, 64).launch(b, a, b.asarray(a), b.empty((64, 64)))


# name -> (the rule it breaks, the call)
CASES: dict[str, tuple[str, Callable[[Any], None]]] = {
    # what crashed every Winograd and FFT path on an H100 on 2026-11-25
    "a host array to to_constant": ("host-array", lambda b: b.to_constant("fft.cu", "c_twiddle", TWIDDLES)),
    "a host array as a launch argument": ("host-array", lambda b: relu(b, x=np.zeros(N, np.float32))),
    "a host array as a GEMM operand": ("host-array", _gemm_with_a_host_operand),
    "a float64 device array (CuPy keeps it at 64 bits)": ("dtype", lambda b: relu(b, x=b.asarray(np.zeros(N)))),
    "an int64 device array": ("dtype", lambda b: relu(b, x=b.asarray(np.zeros(N, np.int64)))),
    "a float64 constant": (
        "dtype",
        lambda b: b.to_constant("fft.cu", "c_twiddle", b.asarray(TWIDDLES.astype(np.float64))),
    ),
    "a strided view": ("contiguous", lambda b: relu(b, x=b.empty((N, 2))[:, 0])),
    "an int above int32": ("int32", lambda b: relu(b, n=2**31)),
    "an int below int32": ("int32", lambda b: relu(b, n=-(2**31) - 1)),
    "a string argument": ("argument", lambda b: relu(b, n="1024")),
    "a grid of 65536 along y": ("grid", lambda b: relu(b, grid=(1, 65536))),
    "an empty grid": ("grid", lambda b: relu(b, grid=(0,))),
    "a block of 2048 threads": ("block", lambda b: relu(b, block=(2048,))),
    "a block of 64 x 1 x 65": ("block", lambda b: relu(b, block=(1, 1, 65))),
    "1 MiB of dynamic shared memory": ("shared", lambda b: relu(b, shared=1 << 20)),
    "a constant larger than its symbol": (
        "constant-size",
        lambda b: b.to_constant("winograd.cu", "c_wino", b.asarray(np.zeros(3 * 8 * 8 + 1, np.float32))),
    ),
}


def assert_refused(backend: Any, name: str) -> None:
    """CASES[name] on ``backend`` raises Refused under its rule, and nothing was launched."""
    rule, call = CASES[name]
    backend.log.clear()
    with pytest.raises(Refused) as refused:
        call(backend)
    assert refused.value.rule == rule
    assert backend.log == []


def assert_a_valid_launch_runs(backend: Any) -> None:
    y = backend.empty((N,))
    relu(backend, y=y)
    backend.to_constant("fft.cu", "c_twiddle", backend.asarray(TWIDDLES))
    backend.synchronize()
    np.testing.assert_array_equal(backend.asnumpy(y), np.maximum(np.linspace(-1, 1, N, dtype=np.float32), 0))
