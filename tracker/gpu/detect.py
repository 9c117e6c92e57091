"""Is there a CUDA device? Asked of the driver through ctypes: no CuPy, no toolkit, a few ms."""

from __future__ import annotations

import ctypes
import importlib.util
import sys

from tracker.errors import BackendUnavailable
from tracker.extras import install


def _driver() -> ctypes.CDLL | None:
    """The CUDA driver library, or None where there is none."""
    try:
        return ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")
    except OSError:
        return None


def cuda_devices() -> tuple[int, str]:
    """(number of CUDA devices, a phrase saying how we know)."""
    driver = _driver()
    if driver is None:
        return 0, "no NVIDIA driver (libcuda not found)"
    status = driver.cuInit(0)
    if status != 0:
        return 0, f"the NVIDIA driver found no usable GPU (cuInit error {status})"
    count = ctypes.c_int(0)
    if driver.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return 0, "the NVIDIA driver reports no CUDA device"
    return count.value, f"{count.value} CUDA device(s)"


def device_name(ordinal: int = 0) -> str | None:
    """CUDA's name of a device ('NVIDIA H100 80GB HBM3'), as CuPy reports it; None without one."""
    driver = _driver()
    if driver is None:
        return None
    device, text = ctypes.c_int(0), ctypes.create_string_buffer(256)
    if driver.cuInit(0) != 0 or driver.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
        return None
    if driver.cuDeviceGetName(text, len(text), device) != 0:
        return None
    return text.value.decode(errors="replace")


def compute_capability(ordinal: int = 0) -> float | None:
    """The device's compute capability (9.0), asked of the driver; None without one."""
    driver = _driver()
    if driver is None:
        return None
    device, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
        return None
    for value, attribute in ((major, 75), (minor, 76)):  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, _MINOR
        if driver.cuDeviceGetAttribute(ctypes.byref(value), attribute, device) != 0:
            return None
    return major.value + minor.value / 10


def driver_version() -> str | None:
    """The NVIDIA driver's version (``580.159.04``), as nvidia-smi prints it; None if unknown.
    Not cudaDriverGetVersion, which gives the CUDA version the driver supports (13.0)."""
    import re
    import subprocess
    from pathlib import Path

    try:
        match = re.search(r"Kernel Module\s+(\d+\.\d+(?:\.\d+)?)", Path("/proc/driver/nvidia/version").read_text())
        if match:
            return match.group(1)
    except OSError:
        pass
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return done.stdout.split()[0] if done.returncode == 0 and done.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def require_gpu(what: str) -> str:
    """Raise unless this machine has a CUDA device and CuPy; return how we know the device."""
    count, why = cuda_devices()
    if not count:
        raise BackendUnavailable(f"{what} needs an NVIDIA GPU, and this machine has none ({why})")
    if importlib.util.find_spec("cupy") is None:
        raise BackendUnavailable(f"{what} needs CuPy: {install('gpu')}")
    return why
