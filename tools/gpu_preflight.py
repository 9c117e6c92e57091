"""Preflight of a GPU stage (tools/gpu_stage.sh): is everything a stage needs here, found the way
tracker finds it? Prints one line per check and a last line that sums them up; exits 1 on the
first missing piece. No bc, no bare ``ncu`` on PATH: tracker's own finders.
"""

from __future__ import annotations

import importlib
import sys


def check(name: str, thunk) -> str:
    try:
        value = thunk()
    except Exception as exc:  # a preflight reports every failure as one line
        print(f"FAIL {name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        sys.exit(1)
    print(f"ok   {name}: {value}")
    return value


def tiny_kernel() -> str:
    """One RawKernel launched and its result checked: the smallest proof CuPy can run our kind of code."""
    import cupy as cp
    import numpy as np

    kernel = cp.RawKernel(
        r"""extern "C" __global__ void twice(const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2.0f * x[i]; }""",
        "twice",
    )
    x = cp.asarray(np.random.default_rng(0).normal(size=1000).astype(np.float32))
    y = cp.full_like(x, cp.nan)
    kernel((4,), (256,), (x, y, np.int32(1000)))
    if not np.array_equal(cp.asnumpy(y), 2 * cp.asnumpy(x)):
        raise RuntimeError("twice(x) != 2x")
    return "twice(x) == 2x on 1000 floats"


def main() -> None:
    from tracker.gpu.detect import cuda_devices
    from tracker.profilers import find
    from tracker.profilers.ncu import find_sanitizer

    count, why = cuda_devices()
    if not count:
        print(f"FAIL GPU: {why}")
        sys.exit(1)
    for module in ("numpy", "cupy", "sqlalchemy", "pandas", "click", "matplotlib", "seaborn"):
        check(f"import {module}", lambda m=module: getattr(importlib.import_module(m), "__version__", "?"))
    from tracker.gpu.cupy_backend import device_info

    device = check("device", device_info)
    version = check("ncu", lambda: find("ncu").version)
    sanitizer = check("compute-sanitizer", lambda: find_sanitizer() or _missing("compute-sanitizer"))
    check("tiny kernel", tiny_kernel)
    note("libcupti", libcupti)
    print(
        f"{device['device_name']} CC {device['compute_capability']}, driver {device['driver_version']}, "
        f"CUDA {device['cuda_version']}; ncu {version}; sanitizer {'found' if sanitizer else 'missing'}"
    )


def note(name: str, thunk) -> None:
    """A check whose failure stops nothing (what only one collector needs): one line either way."""
    try:
        print(f"ok   {name}: {thunk()}")
    except Exception as exc:
        print(f"note {name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")


def libcupti() -> str:
    """Which libcupti the CUPTI collector loads, its API version, and where its nvperf came from."""
    from tracker.profilers import cupti_range

    version = cupti_range.version()
    loaded = sorted({line.split()[-1] for line in open("/proc/self/maps") if "nvperf_host" in line})
    return f"{cupti_range.describe_library()}, API {version}; nvperf_host {', '.join(loaded) or 'not loaded'}"


def _missing(what: str):
    raise FileNotFoundError(f"{what} not found")


if __name__ == "__main__":
    main()
