"""Run tracker's CUDA kernels on the CPU through cuda_emu.h, as a ``launchers.Backend``.

Each kernel module is compiled once per test session with g++ (C++20) into a shared library;
arrays are NumPy float32 (int32 labels). For tests only: see cuda_emu.h for what it checks.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from tracker.gpu.kernels import KERNEL_DIR, define_options, source_text
from tracker.ops.launch import DEFAULT_SHARED, LaunchRecord, Struct

HERE = Path(__file__).parent
_KERNEL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\([\w, ]+\)\s*)?(\w+)\(')
_CONSTANT = re.compile(r"__constant__ float (\w+)\[")
_DYNAMIC = re.compile(r"extern __shared__ float (\w+)\[\];")


def available() -> bool:
    return shutil.which("g++") is not None


class Emulator:
    def __init__(self, build_dir: Path, l1_bypass: bool = False, staged: bool = False):
        self.build_dir = build_dir
        # The L1-bypass build's source (-DTRACKER_L1_BYPASS), or the staged build's (-DTRACKER_STAGED,
        # its code with L1 cached): their GEMM stages every operand through registers, where the
        # default build copies them around (cp.async on a GPU).
        self.options = ["-DTRACKER_L1_BYPASS"] if l1_bypass else ["-DTRACKER_STAGED"] if staged else []
        self.libs: dict[tuple, ctypes.CDLL] = {}
        self.log: list[LaunchRecord] = []
        self.context = None  # set by the executor to the step being run

    def _lib(self, source: str, defines: tuple = ()) -> ctypes.CDLL:
        if (source, defines) not in self.libs:
            text = _DYNAMIC.sub(r"float* \1 = reinterpret_cast<float*>(emu_dynamic_shared);",
                                source_text(source, defines))
            registry = "".join(f'static bool emu_k_{n} = emu_register("{n}", &{n});\n' for n in _KERNEL.findall(text))
            registry += "".join(f'static bool emu_s_{s} = (emu_symbols()["{s}"] = {{{s}, sizeof {s}}}, true);\n'
                                for s in _CONSTANT.findall(text))
            name = source + "".join(f"-{k}{v}" for k, v in defines) + "".join(f"-{o[2:].lower()}" for o in self.options)
            cpp = self.build_dir / f"{name}.cpp"
            cpp.write_text('#include "cuda_emu.h"\n' + text + "\n" + registry)
            lib = self.build_dir / f"{name}.so"
            # Each tile's build of a module is its own library, with its own shared-memory arrays:
            # -fno-gnu-unique and -Bsymbolic keep a template's static locals from being merged
            # across the libraries loaded into this one process (they differ in size).
            subprocess.run(["g++", "-std=c++20", "-O2", "-shared", "-fPIC", "-pthread", "-w", "-fno-strict-aliasing",
                            "-fno-gnu-unique", "-Wl,-Bsymbolic", f"-I{HERE}", f"-I{KERNEL_DIR}",
                            *define_options(defines), *self.options, str(cpp), "-o", str(lib)], check=True,
                           capture_output=True)
            self.libs[source, defines] = ctypes.CDLL(str(lib))
        return self.libs[source, defines]

    def prepare(self, builds) -> None:
        """Compile these (source, defines) builds now, as many at once as there are CPUs (g++ is
        a process), rather than one at a time as launches first need them."""
        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            list(pool.map(lambda build: self._lib(*build), dict.fromkeys(builds)))

    def launch(self, source, kernel, grid, block, args, shared_bytes=0, defines=()):
        assert shared_bytes <= DEFAULT_SHARED, f"{kernel}: {shared_bytes} bytes of dynamic shared memory"
        record = LaunchRecord(source, kernel, grid, block, shared_bytes, None, self.context)
        assert np.prod(record.block) <= 1024 and max(record.grid) <= 65535
        values = [_c_value(a) for a in args]
        pointers = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        self.log.append(record)
        status = self._lib(source, defines).emu_launch(kernel.encode(),
                                                        *[ctypes.c_uint(v) for v in record.grid + record.block],
                                                        pointers)
        assert status == 0, f"no kernel {kernel} in {source}"

    def empty(self, shape):
        return np.full(shape, np.nan, dtype=np.float32)  # scratch starts poisoned, like every output

    def asarray(self, array):
        return np.array(array, dtype=np.int32 if array.dtype.kind in "iu" else np.float32)

    def asnumpy(self, array):
        return np.asarray(array)

    def synchronize(self):
        pass

    def to_constant(self, source, symbol, array):
        data = np.ascontiguousarray(array, dtype=np.float32)
        assert self._lib(source).emu_to_symbol(symbol.encode(), data.ctypes.data_as(ctypes.c_void_p),
                                               ctypes.c_size_t(data.nbytes)) == 0


def _c_value(arg):
    if arg is None:
        return ctypes.c_void_p(None)
    if isinstance(arg, np.ndarray):
        assert arg.flags.c_contiguous and arg.dtype in (np.float32, np.int32), (arg.dtype, arg.flags)
        return ctypes.c_void_p(arg.ctypes.data)
    if isinstance(arg, Struct):
        fields = [(n, ctypes.c_int32 if t == "i" else ctypes.c_float) for n, t in arg.fields]
        return type(arg.name, (ctypes.Structure,), {"_fields_": fields})(*arg.values)
    if isinstance(arg, (bool, int, np.integer)):
        return ctypes.c_int(int(arg))
    return ctypes.c_float(float(arg))
