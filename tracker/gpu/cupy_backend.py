"""The CuPy backend: compiles each kernel module once per L1 policy, launches kernels, times every
launch with CUDA events, marks regions with NVTX, and tracks the memory pool's high-water mark.

The only module that imports CuPy; ``tracker.gpu.runner`` imports it lazily.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import cupy as cp
import numpy as np

from tracker.gpu.kernels import Overrides, compile_options, constant_bytes, source_text
from tracker.ops.contract import array_bytes, check_constant, check_launch
from tracker.ops.launch import DEFAULT_SHARED, Backend, LaunchRecord, Struct


class CupyBackend:
    """A ``Backend`` on the GPU. Every launch and constant is checked against the device contract
    (tracker/ops/contract.py) before CuPy sees it, as the CPU emulation checks it in CI."""

    def __init__(self, l1_policy: str = "ca", timed: bool = True):
        self.l1_policy = l1_policy
        self.timed = timed
        self.modules: dict[tuple, cp.RawModule] = {}
        self._slots: dict[tuple, int] = {}
        self.log: list[LaunchRecord] = []
        self.context: Any = None
        if os.environ.get("TRACKER_CUPY_POOL") == "off":
            # Under compute-sanitizer: a pool hands out slices of one allocation, so an overrun
            # into a neighbouring array would go unseen. Every array gets its own cudaMalloc.
            cp.cuda.set_allocator(None)
        self.pool = cp.get_default_memory_pool()
        self.peak_bytes = 0
        self.max_shared = cp.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"]

    def module(self, source: str, defines: Overrides = ()) -> Any:
        key = (source, defines)
        if key not in self.modules:
            self.modules[key] = raw_module(source, defines, self.l1_policy)
        return self.modules[key]

    def launch(
        self,
        source: str,
        kernel: str,
        grid: tuple,
        block: tuple,
        args: tuple,
        shared_bytes: int = 0,
        defines: Overrides = (),
    ) -> None:
        check_launch(_is_device, kernel, grid, block, args, shared_bytes, self.max_shared)
        function = self.module(source, defines).get_function(kernel)
        if shared_bytes > DEFAULT_SHARED:
            function.max_dynamic_shared_size_bytes = shared_bytes
        record = LaunchRecord(
            source,
            kernel,
            tuple(grid),
            tuple(block),
            shared_bytes,
            function.num_regs,
            context=self.context,
            array_bytes=array_bytes(_is_device, args),
        )
        if self.timed:
            record.start, record.end = cp.cuda.Event(), cp.cuda.Event()
            record.start.record()
        function(tuple(grid), tuple(block), tuple(_argument(a) for a in args), shared_mem=shared_bytes)
        if self.timed:
            record.end.record()
        self.log.append(record)
        self.peak_bytes = max(self.peak_bytes, self.pool.total_bytes())

    def slots(self, source: str, kernel: str, threads: int, defines: Overrides = ()) -> int:
        """SMs x the CTAs of the loaded build an SM holds (the driver's occupancy calculator), asked
        once per build: every GEMM launch of every iteration reads it."""
        key = (source, kernel, threads, defines)
        if key not in self._slots:
            function = self.module(source, defines).get_function(kernel)
            per_sm = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(function.ptr, threads, 0)
            self._slots[key] = max(1, per_sm) * cp.cuda.Device().attributes["MultiProcessorCount"]
        return self._slots[key]

    def empty(self, shape: tuple) -> Any:
        array = cp.empty(shape, dtype=cp.float32)
        self.peak_bytes = max(self.peak_bytes, self.pool.total_bytes())
        return array

    def asarray(self, array: Any) -> Any:
        out = cp.asarray(array)  # keeps the dtype: a float64 array stays float64 (the contract refuses it at launch)
        self.peak_bytes = max(self.peak_bytes, self.pool.total_bytes())
        return out

    def asnumpy(self, array: Any) -> np.ndarray:
        return cp.asnumpy(array)

    def to_constant(self, source: str, symbol: str, array: Any) -> None:
        check_constant(_is_device, symbol, array, constant_bytes(source)[symbol])
        self.module(source).get_global(symbol).copy_from_device(array.data, array.nbytes)

    def flush_l2(self) -> None:
        """Overwrite twice the L2's size, so that the next launch starts with a cold L2 (as the
        benchmark measures; METHOD.md): the one L2 flush, ``gpu.timing.repeat``'s ``flush``."""
        if not hasattr(self, "_scrub"):
            l2 = cp.cuda.Device().attributes["L2CacheSize"]
            self._scrub = cp.empty(2 * l2 // 4, dtype=cp.float32)
        self._scrub.fill(0)

    def synchronize(self) -> None:
        """Wait for the device, then fill in each timed launch's event time and its start after
        the first launch the log holds (the log is cleared before the measured iterations)."""
        cp.cuda.Device().synchronize()
        origin = self.log[0].start if self.log else None
        for record in self.log:
            if record.start is not None and record.time_ms is None:
                record.time_ms = cp.cuda.get_elapsed_time(record.start, record.end)
                record.start_ms = cp.cuda.get_elapsed_time(origin, record.start)

    @contextmanager
    def region(self, name: str):
        """An NVTX range, so that Nsight tools see layer/phase around its kernels."""
        cp.cuda.nvtx.RangePush(name)
        try:
            yield
        finally:
            cp.cuda.nvtx.RangePop()


def raw_module(source: str, defines: Overrides, l1_policy: str) -> cp.RawModule:
    """A kernel module as the backend compiles it: CuPy compiles on first use and keeps the binary
    in its on-disk cache, keyed on this source text and these options."""
    return cp.RawModule(code=source_text(source, defines), options=compile_options(l1_policy, overrides=defines))


def compile_ahead(jobs: list[tuple[str, Overrides, str]], workers: int) -> None:
    """Compile each (source, -D sizes, L1 policy) into CuPy's on-disk cache, ``workers`` at a time
    in processes of their own (NVRTC takes seconds per module, one at a time in a process), so
    that the runs after it compile nothing. A module that does not compile raises here as it
    would at its first launch."""
    # spawn: a forked child of a process that has touched CUDA cannot use it
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_compile, jobs))


def _compile(job: tuple[str, Overrides, str]) -> None:
    raw_module(*job).compile()


def bracketed(fn: Callable[[], object]) -> tuple[Callable[[], None], Callable[[], float]]:
    """``fn`` between one CUDA event pair per call, and that pair's elapsed time (after a
    synchronize): ``gpu.timing.repeat``'s body and events for work this backend does not log
    (PyTorch's, a copy, a whole untimed iteration)."""
    pair: list = []

    def body() -> None:
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        pair[:] = [start, end]

    def elapsed() -> float:
        start, end = pair
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end)

    return body, elapsed


def synchronize() -> None:
    """Wait for the device (cudaDeviceSynchronize: every stream, CuPy's and PyTorch's alike)."""
    cp.cuda.Device().synchronize()


def _is_device(array: Any) -> bool:
    return isinstance(array, cp.ndarray)


if TYPE_CHECKING:  # mypy checks that this backend speaks the protocol every launcher is written against

    def _speaks_backend(b: CupyBackend) -> Backend:
        return b


def _argument(arg):
    """Kernel arguments with explicit C types: int32 and float32 scalars (CuPy would pass Python
    ints as 64-bit), structs as NumPy structured scalars, None as a null pointer."""
    if isinstance(arg, Struct):
        return arg.numpy()
    if isinstance(arg, bool) or isinstance(arg, (int, np.integer)):
        return np.int32(arg)
    if isinstance(arg, float):
        return np.float32(arg)
    return arg


def device_info() -> dict:
    """Name, compute capability, SM count, clocks and versions of the current device."""
    device = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(device.id)
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else name
    from tracker.gpu.detect import driver_version

    cuda_driver = cp.cuda.runtime.driverGetVersion()  # the CUDA version the driver supports
    runtime = cp.cuda.runtime.runtimeGetVersion()
    return {
        "device_name": name,
        "compute_capability": f"{props['major']}.{props['minor']}",
        "sm_count": props["multiProcessorCount"],
        "sm_clock_mhz": props.get("clockRate", 0) / 1000 or None,
        "mem_clock_mhz": props.get("memoryClockRate", 0) / 1000 or None,
        "driver_version": driver_version() or f"CUDA {cuda_driver // 1000}.{cuda_driver % 1000 // 10}",
        "cuda_version": f"{runtime // 1000}.{runtime % 1000 // 10}",
    }
