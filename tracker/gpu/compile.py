"""Compile kernel modules with NVRTC and read their resource use, with no GPU and no CuPy.

NVRTC (pip: ``nvidia-cuda-nvrtc``, through ``cuda-bindings``) emits a cubin for a named
architecture on a machine without a driver; ``-Xptxas -v`` makes ptxas report each kernel's
registers, shared memory, stack and spills. ptxas does not say which kernel uses ``__constant__``
memory, so that is read from the PTX: the ``.const`` arrays each entry's body names. The options
are ``compile_options``: the runtime's own.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from functools import lru_cache

from tracker.errors import TrackerError
from tracker.gpu.kernels import compile_options, source_text


@dataclass(frozen=True)
class Resources:
    registers: int
    shared_bytes: int  # static shared memory
    stack_bytes: int
    spill_stores: int
    spill_loads: int
    constant_bytes: int = 0  # __constant__ arrays the kernel reads


@dataclass(frozen=True)
class Build:
    source: str
    arch: str
    l1_policy: str
    kernels: dict[str, Resources]
    cubin_sha: str  # tells whether an option (the L1 policy) changed the machine code


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        raise TrackerError("the compile check needs NVRTC: pip install cuda-bindings nvidia-cuda-nvrtc "
                           "(or pip install -e '.[test]')") from None
    return nvrtc


def _check(result, what: str):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise TrackerError(f"NVRTC {what} failed: {err}")
    return rest[0] if len(rest) == 1 else rest


@lru_cache(maxsize=None)
def build(source: str, arch: str, l1_policy: str) -> Build:
    """Compile kernels/``source`` for ``arch`` (sm_80, sm_90) with L1 policy ``ca`` or ``cg``."""
    nvrtc = _nvrtc()
    options = [o.encode() for o in (*compile_options(l1_policy, arch), "-Xptxas", "-v")]
    program = _check(nvrtc.nvrtcCreateProgram(source_text(source).encode(), source.encode(), 0, [], []),
                     "create")
    try:
        status = nvrtc.nvrtcCompileProgram(program, len(options), options)[0]
        log = _log(nvrtc, program)
        if int(status) != 0:
            raise TrackerError(f"{source} does not compile for {arch} (-dlcm={l1_policy}):\n{log}")
        cubin = _read(nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN, program, "cubin")
        ptx = _read(nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX, program, "PTX").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    constants = constant_use(ptx)
    kernels = {name: replace(r, constant_bytes=constants.get(name, 0)) for name, r in parse_ptxas(log).items()}
    return Build(source, arch, l1_policy, kernels, hashlib.sha256(cubin).hexdigest()[:16])


def _read(get_size, get, program, what: str) -> bytes:
    size = _check(get_size(program), f"{what} size")
    data = b" " * size
    _check(get(program, data), what)
    return data.rstrip(b"\0")


def _log(nvrtc, program) -> str:
    return _read(nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog, program, "log").decode(errors="replace")


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_ptxas(log: str) -> dict[str, Resources]:
    """Per kernel: the 'Compiling entry', 'stack frame' and 'Used N registers' lines of ptxas -v."""
    kernels: dict[str, Resources] = {}
    name, frame = None, (0, 0, 0)
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            name, frame = m.group(1), (0, 0, 0)
        elif (m := _FRAME.search(line)) and name:
            frame = tuple(int(g) for g in m.groups())
        elif (m := _USED.search(line)) and name:
            kernels[name] = Resources(int(m.group(1)), int(m.group(2) or 0), *frame)
            name = None
    return kernels


_CONST = re.compile(r"^\.const \.align \d+ \.b8 (\w+)\[(\d+)\];", re.M)
_BODY = re.compile(r"\.entry (\w+)\((.*?)(?=\.entry |\Z)", re.S)


def constant_use(ptx: str) -> dict[str, int]:
    """Per entry: bytes of the module's ``.const`` arrays its body refers to."""
    arrays = {name: int(size) for name, size in _CONST.findall(ptx)}
    return {entry: sum(size for name, size in arrays.items() if re.search(rf"\b{name}\b", body))
            for entry, body in _BODY.findall(ptx)}


def variant_rows(arch: str, l1_policies: tuple[str, ...]) -> list[dict]:
    """One row per (op, phase, variant, L1 policy): its kernels' worst-case resources and where
    it was last verified."""
    from tracker.gpu.kernels import TABLE
    from tracker.gpu.verified import records, status

    history = records()
    rows = []
    for variant in TABLE:
        verified_on, changed = status(variant, history)
        for policy in l1_policies:
            used = [build(source, arch, policy).kernels[name] for source, name in variant.kernels]
            rows.append({
                "op": variant.op, "phase": variant.phase, "variant": variant.variant, "l1": policy,
                "kernels": [name for _, name in variant.kernels],
                "registers": max(r.registers for r in used),
                "shared_bytes": max(r.shared_bytes for r in used),
                "constant_bytes": max(r.constant_bytes for r in used),
                "spill_bytes": sum(r.spill_stores + r.spill_loads for r in used),
                "stack_bytes": max(r.stack_bytes for r in used),
                "verified_on": verified_on, "changed_since": changed, "note": variant.note,
            })
    return rows
