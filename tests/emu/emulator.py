"""Run tracker's CUDA kernels on the CPU through cuda_emu.h, as a ``tracker.ops.launch.Backend``.

Each kernel module is compiled with g++ (C++20) into a shared library, once per machine: builds are
kept by the hash of what goes into them (``_compiled``), so pytest-xdist's workers and later
sessions load what one of them compiled (g++ is most of the emulated tests' time).
It keeps the GPU's contract: its device arrays are a type of their own (``DeviceArray``) that only
the emulator makes and reads back, as CuPy's are, and every launch and constant is checked against
the same rules the CuPy backend checks (tracker/ops/contract.py), so that CI refuses what the GPU
would. For tests only: see cuda_emu.h for what it checks of the kernels themselves.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tracker.gpu.kernels import KERNEL_DIR, Overrides, define_options, source_text
from tracker.ops.contract import H100_MAX_SHARED, array_bytes, check_constant, check_launch
from tracker.ops.launch import Backend, LaunchRecord, Struct

from .trace import Trace

HERE = Path(__file__).parent
# The CTA slots a launch sizes its split-K to (Backend.slots): an H100's 132 SMs x the two CTAs an SM
# holds of every default GEMM build (at most 128 registers; tests/test_waves.py reads the builds)
SMS, SLOTS = 132, 132 * 2
ALIGNMENT = 256  # bytes: where cudaMalloc's arrays start
# Compiled builds, by content: $TRACKER_EMU_CACHE, else a folder of this user's in the temp directory.
CACHE = Path(os.environ.get("TRACKER_EMU_CACHE") or Path(tempfile.gettempdir()) / f"tracker-emu-{os.getuid()}")
_KERNEL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\([\w, ]+\)\s*)?(\w+)\(')
_CONSTANT = re.compile(r"__constant__ float (\w+)\[")
_DYNAMIC = re.compile(r"extern __shared__ float (\w+)\[\];")
_LAUNCH_FAILURES = {
    1: "no such kernel",
    2: "no memory for the threads' stacks",
    3: "deadlock: a barrier that some thread still running never reaches",
    4: "misaligned address: a 16-byte access to an address that is not a multiple of 16",
}


def available() -> bool:
    return shutil.which("g++") is not None


_MINT = object()  # the key only Emulator holds: nothing else makes a DeviceArray


class DeviceArray:
    """The emulation's device array, as CuPy's ndarray is the GPU's: only the Emulator makes one
    (``asarray``, ``empty``) and only its ``asnumpy`` (or ``get``) reads one back. It keeps the
    dtype it was given, views share its memory, and NumPy refuses to take it as a host array, with
    CuPy's own message."""

    __slots__ = ("_host",)
    __array_ufunc__ = None  # numpy_array + device_array raises TypeError, as with CuPy

    def __init__(self, host: np.ndarray, key: object):
        if key is not _MINT:
            raise TypeError("only the Emulator makes device arrays (Emulator.asarray, Emulator.empty)")
        self._host = host

    shape = property(lambda self: self._host.shape)
    dtype = property(lambda self: self._host.dtype)
    size = property(lambda self: self._host.size)
    ndim = property(lambda self: self._host.ndim)
    nbytes = property(lambda self: self._host.nbytes)
    flags = property(lambda self: self._host.flags)
    strides = property(lambda self: self._host.strides)

    def __len__(self) -> int:
        return len(self._host)

    def __getitem__(self, key: Any) -> DeviceArray:
        return DeviceArray(self._host[key][...], _MINT)  # [...]: a 0-d view where CuPy gives a 0-d array

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(value, np.ndarray):
            raise TypeError("a host array cannot be assigned into a device array: Emulator.asarray it first")
        self._host[key] = value._host if isinstance(value, DeviceArray) else value

    def reshape(self, *shape: Any) -> DeviceArray:
        return DeviceArray(self._host.reshape(*shape), _MINT)

    def ravel(self) -> DeviceArray:
        return DeviceArray(self._host.ravel(), _MINT)

    def fill(self, value: float) -> None:
        self._host.fill(value)

    def copy(self) -> DeviceArray:
        return DeviceArray(self._host.copy(), _MINT)

    def astype(self, dtype: Any) -> DeviceArray:
        return DeviceArray(self._host.astype(dtype), _MINT)

    def get(self) -> np.ndarray:
        return self._host.copy()

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError(
            "Implicit conversion to a NumPy array is not allowed. "
            "Please use `.get()` to construct a NumPy array explicitly."
        )

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype})"


def is_device(array: Any) -> bool:
    return isinstance(array, DeviceArray)


class Emulator:
    def __init__(
        self, build_dir: Path, l1_bypass: bool = False, staged: bool = False, trace: bool = False, execute: bool = True
    ):
        self.build_dir = build_dir
        # ``execute=False``: launches are checked and logged, not run, and arrays hold no values: a
        # plan's launch geometry at full size (the wave model's), with nothing compiled
        self.execute = execute
        # The L1-bypass build's source (-DTRACKER_L1_BYPASS), or the staged build's (-DTRACKER_STAGED,
        # its code with L1 cached): their GEMM stages every operand through registers, where the
        # default build copies them around (cp.async on a GPU).
        self.options = ["-DTRACKER_L1_BYPASS"] if l1_bypass else ["-DTRACKER_STAGED"] if staged else []
        # ``trace``: every launch's memory accesses are recorded (emu_trace.h), one Trace a launch in
        # ``traces``, for tests/emu/trace.py to count sectors and bank wavefronts
        self.options += [*TRACE_OPTIONS, "-DEMU_TRACE"] if trace else []
        self.traces: list[Trace] = []
        self.traced_kernels: set[str] | None = None  # the kernels whose launches are traced (None: all)
        self.libs: dict[tuple, ctypes.CDLL] = {}
        self.log: list[LaunchRecord] = []
        self.context = None  # set by the executor to the step being run

    def _lib(self, source: str, defines: tuple = ()) -> ctypes.CDLL:
        if (source, defines) not in self.libs:
            text = _DYNAMIC.sub(
                r"float* \1 = reinterpret_cast<float*>(emu_dynamic_shared);", source_text(source, defines)
            )
            registry = "".join(f'static bool emu_k_{n} = emu_register("{n}", &{n});\n' for n in _KERNEL.findall(text))
            registry += "".join(
                f'static bool emu_s_{s} = (emu_symbols()["{s}"] = {{{s}, sizeof {s}}}, true);\n'
                for s in _CONSTANT.findall(text)
            )
            name = source + "".join(f"-{k}{v}" for k, v in defines) + ("-trace" if self.tracing else "")
            name += "".join(f"-{o[2:].lower()}" for o in self.options if o.startswith("-D"))
            options = [
                *_COMPILE,
                "-shared",
                "-Wl,-Bsymbolic",
                f"-I{_precompiled_header()}",
                f"-I{HERE}",
                f"-I{KERNEL_DIR}",
                *define_options(defines),
                *self.options,
            ]
            lib = self.build_dir / f"{name}.so"
            shutil.copyfile(_compiled('#include "cuda_emu.h"\n' + text + "\n" + registry, options), lib)  # its own copy
            self.libs[source, defines] = ctypes.CDLL(str(lib))
            self.libs[source, defines].emu_symbol_bytes.restype = ctypes.c_longlong
        return self.libs[source, defines]

    def prepare(self, builds) -> None:
        """Compile these (source, defines) builds now, as many at once as there are CPUs (g++ is
        a process), rather than one at a time as launches first need them."""
        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            list(pool.map(lambda build: self._lib(*build), dict.fromkeys(builds)))

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
        check_launch(is_device, kernel, grid, block, args, shared_bytes, H100_MAX_SHARED)
        record = LaunchRecord(
            source, kernel, grid, block, shared_bytes, None, self.context, array_bytes=array_bytes(is_device, args)
        )
        self.log.append(record)
        if not self.execute:
            return
        values = [_c_value(a) for a in args]
        pointers = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        lib = self._lib(source, defines)
        traced = self.tracing and (self.traced_kernels is None or kernel in self.traced_kernels)
        if self.tracing:
            lib.emu_trace_start(ctypes.c_uint64(TRACE_CAPACITY if traced else 0))
        status = lib.emu_launch(kernel.encode(), *[ctypes.c_uint(v) for v in record.grid + record.block], pointers)
        assert status == 0, f"{kernel} in {source}: {_LAUNCH_FAILURES.get(status, status)}"
        if traced:
            self.traces.append(Trace.read(lib, kernel, record.grid, record.block, args))

    @property
    def tracing(self) -> bool:
        return "-DEMU_TRACE" in self.options

    def slots(self, source: str, kernel: str, threads: int, defines: Overrides = ()) -> int:
        return SLOTS  # the GPU it stands in for; tests/test_waves.py reads the builds' residency

    def empty(self, shape: tuple) -> DeviceArray:
        made = _allocated(shape, np.dtype(np.float32))
        if self.execute:  # else pages never touched: a full-size plan costs no memory
            made.fill(np.nan)  # scratch starts poisoned, like every output
        return DeviceArray(made, _MINT)

    def asarray(self, array: Any) -> DeviceArray:
        """A device copy of a host array, its dtype kept as CuPy keeps it (float64 stays float64)."""
        if isinstance(array, DeviceArray):
            return array
        host = np.asarray(array)
        made = _allocated(host.shape, host.dtype)
        made[...] = host
        return DeviceArray(made, _MINT)

    def asnumpy(self, array: Any) -> np.ndarray:
        return array.get() if isinstance(array, DeviceArray) else np.asarray(array)

    def synchronize(self) -> None:
        pass

    def symbol_bytes(self, source: str, symbol: str) -> int:
        """A __constant__ symbol's size as the compiler declared it (sizeof)."""
        size = self._lib(source).emu_symbol_bytes(symbol.encode())
        assert size >= 0, f"no __constant__ {symbol} in {source}"
        return size

    def to_constant(self, source: str, symbol: str, array: Any) -> None:
        if not self.execute:
            return
        check_constant(is_device, symbol, array, self.symbol_bytes(source, symbol))
        assert (
            self._lib(source).emu_to_symbol(
                symbol.encode(), ctypes.c_void_p(array._host.ctypes.data), ctypes.c_size_t(array.nbytes)
            )
            == 0
        )


if TYPE_CHECKING:  # mypy checks that the emulation speaks the protocol every launcher is written against

    def _speaks_backend(b: Emulator) -> Backend:
        return b


# What g++ compiles every build with. Each tile's build of a module is its own library, with its own
# shared-memory arrays: -fno-gnu-unique (and -Bsymbolic, when linking) keep a template's static
# locals from being merged across the libraries loaded into this one process (they differ in size).
_COMPILE = ["-std=c++20", "-O2", "-fPIC", "-pthread", "-w", "-fno-strict-aliasing", "-fno-gnu-unique"]
# A traced build: g++'s kernel AddressSanitizer with outlined checks calls a hook (emu_trace.h) on
# every load and store; no shadow memory, no checks of globals or the stack, no runtime library.
TRACE_OPTIONS = [
    "-fsanitize=kernel-address",
    "--param=asan-instrumentation-with-call-threshold=0",
    "--param=asan-globals=0",
    "--param=asan-stack=0",
    "-fno-tree-sra",  # a float4 load stays one 16-byte load, as on the GPU, not four of 4 bytes
]
TRACE_CAPACITY = 1 << 23  # accesses a traced launch may record (24 bytes each, reserved, not committed)


@cache
def _precompiled_header() -> Path:
    """The folder of cuda_emu.h precompiled (``cuda_emu.h.gch``), made once per machine as builds are:
    its standard library headers took two thirds of a build's g++ time (0.8 of 1.3 s). g++ reads
    it in place of the header where its folder comes first in the include path, and falls back to
    the header itself if the two ever disagree."""
    key = hashlib.sha256("\0".join([_headers(), *_COMPILE]).encode()).hexdigest()[:32]
    folder = CACHE / f"pch-{key}"
    header = folder / "cuda_emu.h.gch"
    if header.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not header.exists():
            partial = folder / f"cuda_emu.h.{os.getpid()}.gch"
            subprocess.run(
                ["g++", *_COMPILE, "-x", "c++-header", str(HERE / "cuda_emu.h"), "-o", str(partial)],
                check=True,
                capture_output=True,
            )
            os.replace(partial, header)
    return folder


def _compiled(code: str, options: list[str]) -> Path:
    """The shared library g++ makes of ``code`` with ``options``, from the cache when built before
    (by this process, another pytest-xdist worker or an earlier session); one builder per build at
    a time, the others waiting on its lock."""
    key = hashlib.sha256("\0".join([code, *options, _headers()]).encode()).hexdigest()[:32]
    built = CACHE / f"{key}.so"
    if built.exists():
        return built
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not built.exists():
            cpp = CACHE / f"{key}.{os.getpid()}.cpp"
            cpp.write_text(code)
            partial = CACHE / f"{key}.{os.getpid()}.so"
            subprocess.run(["g++", *options, str(cpp), "-o", str(partial)], check=True, capture_output=True)
            os.replace(partial, built)  # whole or absent, whoever looks
            cpp.unlink()
    return built


@cache
def _headers() -> str:
    """What the builds include besides their own text: the emulation's header and the kernels'
    shared ones, and the compiler's version."""
    files = sorted([*HERE.glob("*.h"), *KERNEL_DIR.glob("*.cuh")])
    version = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout
    return version + "".join(f.name + f.read_text() for f in files)


def _allocated(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """An array whose first byte is 256-byte aligned, as cudaMalloc's are: which 32-byte sectors an
    access touches (tests/emu/trace.py) depends on it."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def _c_value(arg: Any) -> Any:
    """A checked argument (tracker/ops/contract.py) as the C value the kernel takes."""
    if arg is None:
        return ctypes.c_void_p(None)
    if isinstance(arg, DeviceArray):
        return ctypes.c_void_p(arg._host.ctypes.data)
    if isinstance(arg, Struct):
        fields = [(n, ctypes.c_int32 if t == "i" else ctypes.c_float) for n, t in arg.fields]
        return type(arg.name, (ctypes.Structure,), {"_fields_": fields})(*arg.values)
    if isinstance(arg, (bool, int, np.integer)):
        return ctypes.c_int(int(arg))
    return ctypes.c_float(float(arg))
