"""Compile kernel modules with NVRTC and read their resource use and load mix, with no GPU and
no CuPy.

NVRTC (pip: ``nvidia-cuda-nvrtc``, through ``cuda-bindings``) emits a cubin for a named
architecture on a machine without a driver; ``-Xptxas -v`` makes ptxas report each kernel's
registers, shared memory, stack and spills. ptxas does not say which kernel uses ``__constant__``
memory, so that is read from the PTX: the ``.const`` arrays each entry's body names. Which global
loads go through L1 is read from the SASS (``cuobjdump -sass``; pip: ``nvidia-cuda-cuobjdump``).
The options are the runtime's own: ``compile_options`` and what CuPy adds (``CUPY_ADDS``).

What a build yields is kept on disk by the hash of everything it depends on (the source as
compiled, the options, NVRTC's version and this module's own code): ``$TRACKER_BUILD_CACHE``, else
``~/.cache/tracker/builds`` (``off``: none). A second ``tracker kernels``, and the test processes
that read the same builds, then compile nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from functools import cache
from pathlib import Path

from tracker.errors import TrackerError
from tracker.extras import install
from tracker.gpu.kernels import CUPY_ADDS, Overrides, compile_options, launch_defines, modules, source_text
from tracker.ops.gemm import Tile
from tracker.ops.launch import SM_REGISTERS, THREADS


@dataclass(frozen=True)
class Resources:
    registers: int
    shared_bytes: int  # static shared memory
    stack_bytes: int
    spill_stores: int
    spill_loads: int
    constant_bytes: int = 0  # __constant__ arrays the kernel reads
    global_loads: int = 0  # LDG instructions in the SASS
    l1_loads: int = 0  # ... of which go through L1 (read-only path, or SM-scoped)
    ffma_per_lds: float | None = None  # in the main loop (the loop with the most FFMA); None: no LDS there
    ffma_share: float | None = None  # FFMA's share of the main loop's instructions; None: no loop
    wide_loads: float = 0.0  # share of the kernel's LDG and LDS instructions that load 128 bits
    cp_async: int = 0  # LDGSTS instructions (cp.async: global to shared, around the registers)
    wide_copies: int = 0  # ... of which copy 16 bytes (LDGSTS.128)
    wide_stores: int = 0  # 128-bit global stores (STG.E.128, or ST.E.128 through a generic pointer)
    block_threads: int = 0  # __launch_bounds__ (the PTX's .maxntid), else the grid-stride THREADS


@dataclass(frozen=True)
class Build:
    source: str
    arch: str
    l1_policy: str
    kernels: dict[str, Resources]


Job = tuple[str, str, str, Overrides]  # build's arguments: source, arch, L1 policy, overrides
Progress = Callable[[Job, int, int, float], None]  # (job, how many compiled so far, how many to compile, seconds)


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        raise TrackerError(f"the compile check needs NVRTC: {install('compile')}") from None
    return nvrtc


def _check(result, what: str):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise TrackerError(f"NVRTC {what} failed: {err}")
    return rest[0] if len(rest) == 1 else rest


def build(source: str, arch: str, l1_policy: str, overrides: Overrides = ()) -> Build:
    """Compile kernels/``source`` for ``arch`` (sm_80, sm_90) with L1 policy ``ca`` or ``cg``, and
    -D ``overrides`` (a GEMM tile other than the default); once a process."""
    return _build(source, arch, l1_policy, overrides)  # one cache key however the call is spelled


@cache
def _build(source: str, arch: str, l1_policy: str, overrides: Overrides) -> Build:
    nvrtc = _nvrtc()
    options = _options(arch, l1_policy, overrides)
    text = source_text(source, overrides)
    folder = cache_dir()
    if folder is None:
        return _compile(nvrtc, source, arch, l1_policy, text, options)
    key = _cache_key(nvrtc, text, options)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = open(folder / f"{key}.lock", "w")
    except OSError:  # a folder it cannot write: compile here, keep nothing
        return _compile(nvrtc, source, arch, l1_policy, text, options)
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process compiles it, the others wait and read it
        kept = folder / f"{key}.json"
        found = _kept(kept)
        if found is not None:
            return found
        done = _compile(nvrtc, source, arch, l1_policy, text, options)
        partial = folder / f"{key}.{os.getpid()}.json"
        try:
            partial.write_text(json.dumps(asdict(done)))
            os.replace(partial, kept)  # whole or absent, whoever looks
        except OSError:
            pass  # kept next time, perhaps
        return done


def _options(arch: str, l1_policy: str, overrides: Overrides) -> list[bytes]:
    """NVRTC's options for a build: the runtime's, and ptxas's resource report."""
    return [o.encode() for o in (*compile_options(l1_policy, arch, overrides), *CUPY_ADDS, "-Xptxas", "-v")]


def _cache_key(nvrtc, text: str, options: list[bytes]) -> str:
    """A build's name in the cache: the hash of everything it depends on."""
    return hashlib.sha256(
        b"\0".join([text.encode(), *options, repr(nvrtc.nvrtcVersion()[1:]).encode(), Path(__file__).read_bytes()])
    ).hexdigest()[:32]


def is_kept(job: Job) -> bool:
    """Whether ``job``'s build is already in the build cache (so ``build`` compiles nothing)."""
    folder = cache_dir()
    if folder is None:
        return False
    source, arch, l1_policy, overrides = job
    key = _cache_key(_nvrtc(), source_text(source, overrides), _options(arch, l1_policy, overrides))
    return _kept(folder / f"{key}.json") is not None


def cache_dir() -> Path | None:
    """Where builds are kept: $TRACKER_BUILD_CACHE, else ~/.cache/tracker/builds; None for 'off'."""
    value = os.environ.get("TRACKER_BUILD_CACHE")
    if value == "off":
        return None
    return (
        Path(value)
        if value
        else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tracker" / "builds"
    )


_RESOURCE_FIELDS = {f.name for f in fields(Resources)}


def _kept(path: Path) -> Build | None:
    """The build kept at ``path``; None where there is none, or it cannot be read as one."""
    try:
        data = json.loads(path.read_text())
        if any(set(r) != _RESOURCE_FIELDS for r in data["kernels"].values()):
            return None  # kept by an older tracker that read fewer figures: build again
        return Build(
            data["source"],
            data["arch"],
            data["l1_policy"],
            {name: Resources(**r) for name, r in data["kernels"].items()},
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def front_end(source: str, arch: str, l1_policy: str, overrides: Overrides = ()) -> None:
    """Compile kernels/``source`` as ``build`` does, but only to PTX for ``arch``'s virtual
    architecture (compute_90 for sm_90): NVRTC's front end and optimizer, without ptxas and the SASS,
    most of a build's time. What the oldest NVRTC allowed must accept (tests/test_nvrtc_floor.py)."""
    nvrtc = _nvrtc()
    options = [
        o.encode()
        for o in (
            *compile_options(l1_policy, None, overrides),
            *CUPY_ADDS,
            f"--gpu-architecture=compute_{arch.removeprefix('sm_')}",
        )
    ]
    with _compiled(nvrtc, source, arch, l1_policy, source_text(source, overrides), options):
        pass


@contextmanager
def _compiled(nvrtc, source: str, arch: str, l1_policy: str, text: str, options: list[bytes]) -> Iterator:
    """The NVRTC program of ``text`` compiled with ``options``, and its log; a TrackerError with
    the log where it does not compile."""
    program = _check(nvrtc.nvrtcCreateProgram(text.encode(), source.encode(), 0, [], []), "create")
    try:
        status = nvrtc.nvrtcCompileProgram(program, len(options), options)[0]
        log = _log(nvrtc, program)
        if int(status) != 0:
            raise TrackerError(f"{source} does not compile for {arch} (-dlcm={l1_policy}):\n{log}")
        yield program, log
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def module_sass(source: str, arch: str, l1_policy: str = "ca", overrides: Overrides = ()) -> str:
    """The SASS of kernels/``source`` compiled as ``build`` compiles it, for a test that reads the
    instructions themselves; not kept (``build`` keeps the counts it reads from them)."""
    nvrtc = _nvrtc()
    text, options = source_text(source, overrides), _options(arch, l1_policy, overrides)
    with _compiled(nvrtc, source, arch, l1_policy, text, options) as (program, _):
        return sass(_read(nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN, program, "cubin"))


def _compile(nvrtc, source: str, arch: str, l1_policy: str, text: str, options: list[bytes]) -> Build:
    with _compiled(nvrtc, source, arch, l1_policy, text, options) as (program, log):
        cubin = _read(nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN, program, "cubin")
        ptx = _read(nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX, program, "PTX").rstrip(b"\0").decode()
    machine_code = sass(cubin)
    constants, loads, mix, bounds = (
        constant_use(ptx),
        global_loads(machine_code),
        instruction_mix(machine_code),
        block_bounds(ptx),
    )
    kernels = {
        name: replace(
            r,
            constant_bytes=constants.get(name, 0),
            block_threads=bounds.get(name, THREADS),
            **loads.get(name, {}),
            **mix.get(name, {}),
        )
        for name, r in parse_ptxas(log).items()
    }
    return Build(source, arch, l1_policy, kernels)


def build_all(jobs: Iterable[Job], progress: Progress | None = None) -> dict[Job, Build]:
    """``build`` for each job, as many at once as there are CPUs: NVRTC and cuobjdump run outside
    Python's lock, and one compile takes seconds. ``progress`` hears of each job the build cache
    did not hold as it finishes compiling."""
    todo = list(dict.fromkeys(jobs))
    fresh = {job for job in todo if not is_kept(job)} if progress else set()
    lock, finished = threading.Lock(), 0

    def timed(job: Job) -> Build:
        nonlocal finished
        start = time.monotonic()
        done = build(*job)
        if progress and job in fresh:
            with lock:  # one line at a time, numbered in the order they finish
                finished += 1
                progress(job, finished, len(fresh), time.monotonic() - start)
        return done

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        return dict(zip(todo, pool.map(timed, todo)))


def _read(get_size, get, program, what: str) -> bytes:
    """The whole buffer: a cubin may end in zero bytes, so nothing is stripped here."""
    size = _check(get_size(program), f"{what} size")
    data = b" " * size
    _check(get(program, data), what)
    return data


def _log(nvrtc, program) -> str:
    log = _read(nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog, program, "log")
    return log.rstrip(b"\0").decode(errors="replace")


def cuobjdump() -> str:
    """NVIDIA's cuobjdump: on PATH, or from the pip package nvidia-cuda-cuobjdump."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import nvidia
    except ImportError:
        nvidia = None
    for root in getattr(nvidia, "__path__", []):
        for candidate in sorted(Path(root).glob("cu*/bin/cuobjdump"), reverse=True):
            return str(candidate)
    raise TrackerError(f"reading the SASS needs cuobjdump: {install('compile')}")


def sass(cubin: bytes) -> str:
    """``cuobjdump -sass`` of a cubin."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        done = subprocess.run([cuobjdump(), "-sass", file.name], capture_output=True, text=True, timeout=120)
    if "nvdisasm" in done.stderr:  # cuobjdump runs nvdisasm from its own folder, else from PATH
        raise TrackerError(f"reading the SASS needs nvdisasm beside {cuobjdump()}: {install('compile')}")
    if done.returncode != 0 or "Function :" not in done.stdout:
        raise TrackerError(f"cuobjdump -sass failed: {(done.stderr or done.stdout).strip()[:200]}")
    return done.stdout


_FUNCTION = re.compile(r"^\s*Function : (\S+)", re.M)
_LDG = re.compile(r"\bLDG(?![A-Z])(?:\.[A-Z0-9]+)*")  # not LDGSTS (cp.async) nor LDGDEPBAR


def global_loads(sass_text: str) -> dict[str, dict[str, int]]:
    """Per kernel: its global loads (LDG) and how many of them go through L1. A load goes around L1
    only as ``.STRONG.GPU`` (or ``.SYS``): what -dlcm=cg makes of a plain load. The read-only path
    (``.CONSTANT``) and SM-scoped loads (``.STRONG.SM``, -dlcm=ca) are cached in L1."""
    counts: dict[str, dict[str, int]] = {}
    parts = _FUNCTION.split(sass_text)
    for name, body in zip(parts[1::2], parts[2::2]):
        loads = _LDG.findall(body)
        around = [op for op in loads if (".STRONG.GPU" in op or ".STRONG.SYS" in op) and ".CONSTANT" not in op]
        counts[name] = {"global_loads": len(loads), "l1_loads": len(loads) - len(around)}
    return counts


# An address, its guard (``@!PT``: never runs, padding the compiler puts beside LDGSTS), its opcode.
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*?);")
_TARGET = re.compile(r"0x([0-9a-f]+)")


def _code(sass_text: str) -> Iterator[tuple[str, list[tuple[int, str, str]]]]:
    """Each kernel's name and its instructions, (address, opcode, operands), padding left out."""
    parts = _FUNCTION.split(sass_text)
    for name, body in zip(parts[1::2], parts[2::2]):
        found = _INSTRUCTION.findall(body)
        yield name, [(int(a, 16), op, rest) for a, guard, op, rest in found if guard.strip() != "@!PT"]


def kernel_loops(sass_text: str) -> dict[str, tuple[list[str], list[list[str]]]]:
    """Per kernel, from its SASS: all its opcodes, and those of each loop body."""
    return {name: ([op for _, op, _ in code], _loops(code)) for name, code in _code(sass_text)}


def instruction_mix(sass_text: str) -> dict[str, dict]:
    """Per kernel, from its SASS: FFMA per shared load (LDS) in the main loop and FFMA's share of
    its instructions, the share of loads
    (LDG, LDS) that are 128-bit, how many LDGSTS (cp.async) it issues and how many of those copy
    16 bytes, and its 128-bit global stores (STG, or ST through a generic pointer). The main loop is the
    body of the backward branch whose body holds the most FFMA: for a GEMM, its k-loop."""
    mix: dict[str, dict] = {}
    for name, code in _code(sass_text):
        loads = [op for _, op, _ in code if op.startswith(("LDG.", "LDS")) or op == "LDG"]
        loop = max(_loops(code), key=lambda ops: sum(op.startswith("FFMA") for op in ops), default=[])
        ffma = sum(op.startswith("FFMA") for op in loop)
        lds = sum(op == "LDS" or op.startswith("LDS.") for op in loop)
        mix[name] = {
            "ffma_per_lds": round(ffma / lds, 2) if lds else None,
            "ffma_share": round(ffma / len(loop), 3) if loop else None,
            "wide_loads": round(sum(".128" in op for op in loads) / len(loads), 3) if loads else 0.0,
            "cp_async": sum(op.startswith("LDGSTS") for _, op, _ in code),
            "wide_copies": sum(op.startswith("LDGSTS") and ".128" in op for _, op, _ in code),  # LDGSTS.E.128.ZFILL
            "wide_stores": sum(op.startswith(("STG.", "ST.")) and ".128" in op for _, op, _ in code),
        }
    return mix


def _loops(code: list[tuple[int, str, str]]) -> list[list[str]]:
    """The opcodes of every loop body: from a backward branch's target to the branch."""
    loops = []
    for address, op, rest in code:
        target = _TARGET.search(rest)
        if op.startswith("BRA") and target and int(target.group(1), 16) < address:
            start = int(target.group(1), 16)
            loops.append([o for a, o, _ in code if start <= a <= address])
    return loops


_MAXNTID = re.compile(r"\.entry (\w+)\([^)]*\)\s*\.maxntid (\d+), (\d+), (\d+)")


def block_bounds(ptx: str) -> dict[str, int]:
    """Per entry with __launch_bounds__: its most threads per block (the PTX's .maxntid)."""
    return {name: int(x) * int(y) * int(z) for name, x, y, z in _MAXNTID.findall(ptx)}


# Per SM, for occupancy: registers, shared memory a block may have, threads, blocks.
SM_LIMITS = {"sm_80": (SM_REGISTERS, 163 * 1024, 2048, 32), "sm_90": (SM_REGISTERS, 227 * 1024, 2048, 32)}


def resident_blocks(r: Resources, arch: str) -> int:
    """CTAs of a build an SM holds at once, limited by registers (allocated per warp in units of
    256), shared memory, threads and the most blocks an SM takes."""
    registers, shared, threads, most_blocks = SM_LIMITS[arch]
    warps = -(-r.block_threads // 32)
    per_warp = -(-max(r.registers, 1) * 32 // 256) * 256
    return min(
        most_blocks,
        threads // (warps * 32),
        registers // (per_warp * warps),
        shared // r.shared_bytes if r.shared_bytes else most_blocks,
    )


def occupancy(r: Resources, arch: str) -> float:
    """Theoretical occupancy: resident warps per SM over the most an SM holds."""
    return resident_blocks(r, arch) * -(-r.block_threads // 32) / (SM_LIMITS[arch][2] // 32)


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_ptxas(log: str) -> dict[str, Resources]:
    """Per kernel: the 'Compiling entry', 'stack frame' and 'Used N registers' lines of ptxas -v."""
    kernels: dict[str, Resources] = {}
    name: str | None = None
    frame: tuple[int, ...] = (0, 0, 0)
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
    return {
        entry: sum(size for name, size in arrays.items() if re.search(rf"\b{name}\b", body))
        for entry, body in _BODY.findall(ptx)
    }


def variant_main(used: list[Resources]) -> Resources:
    """The kernel that does a variant's arithmetic: the one whose main loop has the most FFMA per
    shared load, else its first (for a GEMM: the GEMM, not the split-K reduction or bias gradient)."""
    return max(used, key=lambda r: (r.ffma_per_lds or 0.0, -used.index(r)))


def variant_rows(
    arch: str, l1_policies: tuple[str, ...], tile: Tile | None = None, progress: Progress | None = None
) -> list[dict]:
    """One row per (op, phase, variant, L1 policy): its kernels' worst-case resources, where it
    was last verified and what changed since. ``tile``: the GEMM-shaped variants' build, which no
    verification record vouches for (a fused backward whose ReLU mask ring does not fit beside it
    has no row). ``progress``: as ``build_all``'s."""
    from tracker.gpu.verified import records, status
    from tracker.ops import OPS
    from tracker.ops.gemm import leaves_out

    if tile is not None:
        tile.check()  # 0x0x0 would reach NVRTC as -D sizes

    history = records()
    launches = [v for v in OPS.launches() if not leaves_out(v, tile)]
    builds = build_all(
        ((source, arch, policy, defines) for source, defines in modules(tile) for policy in l1_policies), progress
    )
    rows = []
    for variant in launches:
        tuned = tile is not None and variant.tunable
        verification = status(variant, history) if not tuned else None
        for policy in l1_policies:
            used = [
                builds[k.source, arch, policy, launch_defines(variant, tile)].kernels[k.name] for k in variant.kernels
            ]
            main = variant_main(used)
            rows.append(
                {
                    "op": variant.op,
                    "phase": variant.phase,
                    "variant": variant.variant,
                    "l1": policy,
                    "kernels": [k.name for k in variant.kernels],
                    "registers": max(r.registers for r in used),
                    "shared_bytes": max(r.shared_bytes for r in used),
                    "constant_bytes": max(r.constant_bytes for r in used),
                    "spill_bytes": sum(r.spill_stores + r.spill_loads for r in used),
                    "stack_bytes": max(r.stack_bytes for r in used),
                    "global_loads": sum(r.global_loads for r in used),
                    "l1_loads": sum(r.l1_loads for r in used),
                    "ffma_per_lds": main.ffma_per_lds,
                    "wide_loads": main.wide_loads,
                    "cp_async": sum(r.cp_async for r in used),
                    "wide_copies": sum(r.wide_copies for r in used),
                    "wide_stores": sum(r.wide_stores for r in used),
                    "occupancy": round(occupancy(main, arch), 3),
                    "verified_on": verification.gpu if verification else None,
                    "changed_since": verification.changes() if verification else None,
                    "note": variant.note,
                }
            )
    return rows
