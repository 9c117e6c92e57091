"""What CuPy and CUDA refuse at a launch, in one table that every backend checks.

The CuPy backend checks each launch and each constant against ``RULES`` before CuPy sees it; the
CPU emulation (tests/emu) checks the same rules, so that a call the GPU would refuse (or silently
get wrong) fails in CI too. A stand-in more lenient than the GPU hides exactly the bugs it exists
to catch: a NumPy array handed to ``to_constant`` passed every test on a lenient emulation and
crashed every Winograd and FFT path on the first GPU.

Pure Python: each backend passes its own test of what a device array is (``is_device``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tracker.ops.launch import Struct, dim3

# rule -> what the GPU does with a call that breaks it
RULES: dict[str, str] = {
    "host-array": "CuPy refuses a host (NumPy) array where a device array belongs with a TypeError",
    "dtype": "kernels read float32 and int32 arrays; CuPy keeps float64 and int64 at 64 bits, which a kernel "
    "reads as garbage",
    "contiguous": "CuPy passes a view's data pointer, so a kernel would read a non-contiguous view as if it "
    "were contiguous",
    "int32": "an int argument is passed as a C int: outside int32 NumPy raises OverflowError",
    "argument": "a kernel takes device arrays, ints, floats, structs and None (a null pointer), nothing else",
    "grid": "CUDA launches at most (2**31 - 1, 65535, 65535) blocks, at least 1 along each side",
    "block": "a CUDA block has at most 1024 threads, at most (1024, 1024, 64), at least 1 along each side",
    "shared": "a block's dynamic shared memory is at most the device's opt-in limit",
    "constant-size": "a __constant__ symbol holds what it declares; CUDA would copy past its end",
}
ARRAY_DTYPES = ("float32", "int32")
CONSTANT_DTYPES = ("float32",)  # every __constant__ symbol is a float array
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS = 1024
INT32 = (-(2**31), 2**31 - 1)
# An H100's opt-in dynamic shared memory per block (cudaDevAttrMaxSharedMemoryPerBlockOptin): what
# the emulation allows; the CuPy backend reads its device's own.
H100_MAX_SHARED = 227 * 1024

IsDevice = Callable[[Any], bool]


class Refused(TypeError):
    """A call the GPU would refuse or get wrong; ``rule`` is the key of ``RULES`` it breaks."""

    def __init__(self, rule: str, detail: str):
        super().__init__(f"{detail}: {RULES[rule]}")
        self.rule = rule


def check_launch(
    is_device: IsDevice, kernel: str, grid: tuple, block: tuple, args: tuple, shared_bytes: int, max_shared: int
) -> None:
    """Raise Refused where CUDA or CuPy would refuse this launch or pass it wrongly."""
    _check_sizes("grid", kernel, dim3(grid), MAX_GRID)
    _check_sizes("block", kernel, dim3(block), MAX_BLOCK)
    threads = dim3(block)[0] * dim3(block)[1] * dim3(block)[2]
    if threads > MAX_THREADS:
        raise Refused("block", f"{kernel}: a block of {threads} threads")
    if not 0 <= shared_bytes <= max_shared:
        raise Refused("shared", f"{kernel}: {shared_bytes:,} bytes of dynamic shared memory (at most {max_shared:,})")
    for i, arg in enumerate(args):
        _check_argument(is_device, f"{kernel} argument {i}", arg)


def array_bytes(is_device: IsDevice, args: tuple) -> int:
    """The bytes of the device arrays a launch is handed: what a kernel that reads each input and
    writes each output once moves (a transform's compulsory traffic, the benchmark's measure)."""
    return sum(arg.nbytes for arg in args if is_device(arg))


def check_constant(is_device: IsDevice, symbol: str, array: Any, symbol_bytes: int) -> None:
    """Raise Refused unless ``array`` is a contiguous float32 device array that fits ``symbol``."""
    check_array(is_device, f"the constant {symbol}", array, CONSTANT_DTYPES)
    if array.nbytes > symbol_bytes:
        raise Refused("constant-size", f"{array.nbytes:,} bytes into the constant {symbol} of {symbol_bytes:,}")


def check_array(is_device: IsDevice, what: str, array: Any, dtypes: tuple[str, ...] = ARRAY_DTYPES) -> None:
    """Raise Refused unless ``array`` is a C-contiguous device array of one of ``dtypes``."""
    if not is_device(array):
        raise Refused("host-array", f"{what} is a {type(array).__module__}.{type(array).__name__}")
    if str(array.dtype) not in dtypes:
        raise Refused("dtype", f"{what} is {array.dtype}, not {' or '.join(dtypes)}")
    if not array.flags.c_contiguous:
        raise Refused("contiguous", f"{what} of shape {array.shape} is not C-contiguous")


def _check_argument(is_device: IsDevice, what: str, arg: Any) -> None:
    if arg is None or isinstance(arg, (Struct, bool, np.bool_)):
        return
    if _is_int(arg):
        if not INT32[0] <= int(arg) <= INT32[1]:
            raise Refused("int32", f"{what} is {int(arg):,}")
        return
    if _is_float(arg):
        return
    if is_device(arg) or hasattr(arg, "__array_interface__") or hasattr(arg, "__array__"):
        check_array(is_device, what, arg)
        return
    raise Refused("argument", f"{what} is a {type(arg).__name__}")


def _check_sizes(rule: str, kernel: str, sizes: tuple[int, int, int], limits: tuple[int, int, int]) -> None:
    if any(not _is_int(s) or not 1 <= s <= limit for s, limit in zip(sizes, limits)):
        raise Refused(rule, f"{kernel}: a {rule} of {sizes}")


def _is_int(arg: Any) -> bool:
    return isinstance(arg, (int, np.integer))


def _is_float(arg: Any) -> bool:
    return isinstance(arg, (float, np.floating))
