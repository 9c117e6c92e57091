"""Is there a CUDA device? Asked of the driver through ctypes: no CuPy, no toolkit, a few ms."""

from __future__ import annotations

import ctypes
import sys


def cuda_devices() -> tuple[int, str]:
    """(number of CUDA devices, a phrase saying how we know)."""
    name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
    try:
        driver = ctypes.CDLL(name)
    except OSError:
        return 0, "no NVIDIA driver (libcuda not found)"
    status = driver.cuInit(0)
    if status != 0:
        return 0, f"the NVIDIA driver found no usable GPU (cuInit error {status})"
    count = ctypes.c_int(0)
    if driver.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return 0, "the NVIDIA driver reports no CUDA device"
    return count.value, f"{count.value} CUDA device(s)"
