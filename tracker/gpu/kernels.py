"""How the kernels compile: the one place compile options are made, for CuPy at run time, for
NVRTC in the compile check and for the CPU emulation in the tests alike, so they cannot drift.

Which kernels each (op, phase, variant) launches is the op registry's (tracker/ops); so are the
compile-time sizes, handed in here as ``-D`` options. Pure Python (no CuPy).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from tracker.ops import OPS, PhaseLaunch, defines
from tracker.ops.gemm import Tile, leaves_out

KERNEL_DIR = Path(__file__).resolve().parents[2] / "kernels"
HEADERS = ("common.cuh",)
ARCHS = ("sm_80", "sm_90")
L1_POLICIES = ("ca", "cg")  # -dlcm=ca caches global loads in L1; cg bypasses L1 (paper 003's flag)
# The builds a run can launch: the two L1 policies, and the L1-bypass build's code (its operands
# staged through registers, no cp.async) with L1 caching: the l1-bypass experiment's like-for-like
# arm (kernels/common.cuh, TRACKER_STAGED).
STAGED = "ca-staged"
BUILDS = (*L1_POLICIES, STAGED)

# What CuPy's RawModule adds to our options (cupy/cuda/compiler.py, _compile_with_cache_cuda),
# besides the device's architecture: the compile check adds it too, so that it compiles exactly
# what runs.
CUPY_ADDS = ("-ftz=true",)


def sources() -> tuple[str, ...]:
    """Every kernel module a variant launches from, in registry order."""
    return tuple(dict.fromkeys(source for launch in OPS.launches() for source in launch.sources))


Overrides = tuple[tuple[str, int], ...]  # -D sizes replacing the registry's (a GEMM tile under tuning)


def launch_defines(launch: PhaseLaunch, tile: Tile | None = None) -> Overrides:
    """The -D sizes ``launch``'s kernels compile with under ``tile`` (None: the default build):
    the tile's, where the launch is GEMM-shaped, then its own (the ReLU mask's ring)."""
    return (tile.overrides if tile is not None and launch.tunable else ()) + launch.defines


def modules(tile: Tile | None = None) -> tuple[tuple[str, Overrides], ...]:
    """Every (kernel module, -D sizes) a run can compile under ``tile``, in registry order: what
    the compile check builds and what ``cupy_backend.compile_ahead`` fills CuPy's cache with.
    A fused backward whose mask ring does not fit beside ``tile``'s rings has none."""
    return tuple(
        dict.fromkeys(
            (kernel.source, launch_defines(launch, tile))
            for launch in OPS.launches()
            if not leaves_out(launch, tile)
            for kernel in launch.kernels
        )
    )


def define_options(overrides: Overrides = ()) -> tuple[str, ...]:
    """The registry's compile-time sizes as -D options (-DTILE_M=128, ...), ``overrides`` applied."""
    sizes = defines()
    unknown = [name for name, _ in overrides if name not in sizes]
    if unknown:
        raise ValueError(f"no compile-time size {', '.join(unknown)} in the op registry")
    return tuple(f"-D{name}={value}" for name, value in sorted({**sizes, **dict(overrides)}.items()))


def compile_options(l1_policy: str, arch: str | None = None, overrides: Overrides = ()) -> tuple[str, ...]:
    """NVRTC options for every kernel module. CuPy adds the architecture of the device itself,
    and CUPY_ADDS."""
    if l1_policy not in BUILDS:
        raise ValueError(f"L1 policy {l1_policy!r} is not one of {BUILDS}")
    options = (
        "--std=c++17",
        f"--include-path={KERNEL_DIR}",
        "-lineinfo",
        "-Xptxas",
        f"-dlcm={l1_policy[:2]}",
        *define_options(overrides),
    )
    if l1_policy == "cg":  # and no read-only path either (kernels/common.cuh, RESTRICT)
        options += ("-DTRACKER_L1_BYPASS",)
    if l1_policy == STAGED:
        options += ("-DTRACKER_STAGED",)
    return options + ((f"--gpu-architecture={arch}",) if arch else ())


def source_text(source: str, overrides: Overrides = ()) -> str:
    """A module's source as compiled, stamped with the hash of the headers it includes and of the
    -D sizes: CuPy's on-disk cache keys on the source text alone, so a changed header must change
    the text."""
    text = (KERNEL_DIR / source).read_text()
    if source in HEADERS:
        return text
    stamp = hashlib.sha256(b"".join((KERNEL_DIR / h).read_bytes() for h in HEADERS)).hexdigest()[:16]
    return f"{text}\n// {', '.join(HEADERS)}: sha256 {stamp}; {' '.join(define_options(overrides))}\n"


def source_hash(sources: tuple[str, ...]) -> str:
    """A short hash of the sources, the shared headers and the -D sizes they read: what a
    verification record vouches for."""
    digest = hashlib.sha256()
    for name, text in _inputs(sources).items():
        digest.update(name.encode() + b"\0" + text)
    for option in _defines_read(sources):
        digest.update(option.encode())
    return digest.hexdigest()[:16]


def source_digests(sources: tuple[str, ...]) -> dict[str, str]:
    """``source_hash``'s inputs one by one: each file's short hash, and the -D sizes' (key
    ``DEFINES``), so that a record can say which of them changed."""
    digests = {name: hashlib.sha256(text).hexdigest()[:16] for name, text in _inputs(sources).items()}
    return digests | {DEFINES: hashlib.sha256(" ".join(_defines_read(sources)).encode()).hexdigest()[:16]}


DEFINES = "-D sizes"  # source_digests' key for the compile-time sizes


def _inputs(sources: tuple[str, ...]) -> dict[str, bytes]:
    """The text of every file a variant's kernels compile from, by name, sorted."""
    return {name: (KERNEL_DIR / name).read_bytes() for name in sorted({*sources, *HEADERS})}


def _defines_read(sources: tuple[str, ...]) -> list[str]:
    """The -D options (-DTILE_M=128) whose names the files of ``sources`` mention, sorted."""
    texts = b"".join(_inputs(sources).values())
    return [
        f"-D{name}={value}" for name, value in sorted(defines().items()) if re.search(rf"\b{name}\b".encode(), texts)
    ]


_CONSTANT = re.compile(r"__constant__\s+float\s+(\w+)\s*\[([^\]]+)\]")
_INT_NAME = re.compile(r"^\s*(?:#define\s+(\w+)\s+|constexpr\s+int\s+(\w+)\s*=\s*)(\d+)\b", re.M)
_SIZE_EXPR = re.compile(r"[\d\s*+()-]+")


def constant_bytes(source: str, overrides: Overrides = ()) -> dict[str, int]:
    """The ``__constant__`` float arrays of a module and their sizes in bytes, as declared (a
    size may name a -D size, a #define or a constexpr int of the file): what the CuPy backend checks
    a copy into a symbol against, since CuPy's ``get_global`` does not know a symbol's size. The
    CPU emulation's compiler gives the same (``sizeof``; tests/test_contract.py compares them)."""
    text = (KERNEL_DIR / source).read_text()
    names = {**defines(), **dict(overrides)}
    names.update({a or b: int(value) for a, b, value in _INT_NAME.findall(text)})
    sizes = {}
    for symbol, expression in _CONSTANT.findall(text):
        numeric = re.sub(r"[A-Za-z_]\w*", lambda m: str(names[m.group()]), expression)
        if not _SIZE_EXPR.fullmatch(numeric):
            raise ValueError(f"{source}: cannot size __constant__ {symbol}[{expression}]")
        sizes[symbol] = 4 * int(eval(numeric, {"__builtins__": {}}))  # digits and + - * ( ) only
    return sizes
