"""What a kernel's name says: its function name as the profilers print it (``kernel_base``, by
which the join matches pass 1 to pass 2 and the report shortens a name), its full name in the form
ncu's and PyTorch's profiler's demanglers agree on (``comparable``, the library arm's join), and which algorithm and
role a library kernel has in its layer phase (``classify``, ``phase_algorithm``: paper
004's question).

A name may come demangled with its return type, template arguments and parameters (PyTorch's
profiler, nvprof) or as the bare function (ncu's default).

cuDNN and cuBLAS do not say which algorithm a convolution ran, but their kernels' names do:
``implicit_convolve_sgemm`` is an implicit GEMM, ``winograd_nonfused::winogradForwardData4x4``
the data transform of a non-fused Winograd, ``fft2d_r2c_32x32`` the forward FFT of a 32x32-tile
FFT convolution, ``sm90_xmma_fprop_implicit_gemm_tf32f32_…`` a tensor-core implicit GEMM. Each
rule below names the algorithm a kernel belongs to and its role in it: ``math`` (the layer's
arithmetic) or the work around it (a layout or FFT/Winograd ``transform``, a split-K
``reduction``, a ``fill``, precomputed ``offsets``), which is kept and labelled, never dropped.

A layer phase's algorithm is read from all its launches (``phase_algorithm``): a non-fused
Winograd's element-wise products run as a plain ``sgemm`` and an FFT's as a ``cgemm``, which only
the transforms beside them tell apart from a GEMM convolution.

The same rules name what our own kernels ran (direct, implicit GEMM, explicit GEMM, non-fused
Winograd), so that ours and a library's sit side by side. Pure Python: the rules are tested on
real kernel names from public profiler traces and on every kernel tracker registers.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Iterable
from functools import cache
from typing import Any, NamedTuple


def kernel_base(name: str) -> str:
    """The function name in a kernel name as a profiler prints it, demangled or mangled: no return
    type, scope, template arguments or parameter list (``void k<32>(float*, int)`` -> ``k``)."""
    return _outside(_function(_outside(demangled(name).strip(), "(", ")").strip()), "<", ">").strip()


def demangled(name: str) -> str:
    """A mangled C++ name (``_Z...``: what the driver, and so CUPTI, names a library's kernel) as
    the C++ runtime's demangler writes it, which is how PyTorch's profiler writes kernel names;
    any other name, or one it cannot read, as it is."""
    if not name.startswith("_Z"):
        return name
    cxa = _cxa_demangle()
    if cxa is None:
        return name
    status = ctypes.c_int()
    text = cxa(name.encode(), None, None, ctypes.byref(status))
    if not text:
        return name
    try:
        return ctypes.string_at(text).decode(errors="replace") if status.value == 0 else name
    finally:
        _libc().free(ctypes.c_void_p(text))


@cache
def _cxa_demangle():
    """libstdc++'s ``abi::__cxa_demangle``, or None without it."""
    import ctypes.util  # only where a mangled name is read (its import runs more than it needs)

    try:
        function = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6").__cxa_demangle
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_void_p  # a malloc'd string, freed with free()
    function.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    return function


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None)


# How ncu 2025.3 and PyTorch's profiler (Kineto) write the same kernel (the H100 recordings of
# tests/data/gpu-2026-11-25-h100, every kernel of them): a lambda as '[lambda(int) (instance 1)]'
# or '{lambda(int)#1}', an anonymous namespace as '<unnamed>' or '(anonymous namespace)', a
# template argument as '(int)128', '(bool)0', '(unsigned long)2' or '128', 'false', '2ul', a const
# type as 'const T1 &' or 'float const&', a nested function template with 'void' or without, and
# parameter lists with the template's own names (T1, T3) or the types they stand for.
_LAMBDA = re.compile(r"\{lambda\([^()]*\)#(\d+)\}|\[lambda\([^()]*\) \(instance (\d+)\)\]")
_ANONYMOUS = re.compile(r"\(anonymous namespace\)|<unnamed>")
_CAST = re.compile(r"\((?:unsigned |signed )?(?:bool|char|short|int|long|long long)\)(?=-?\d)")
_SUFFIX = re.compile(r"\b(\d+)(?:ull|ul|ll|u|l)\b", re.IGNORECASE)
_WORDS = {"true": "1", "false": "0", "const": "", "void": ""}
_WORD = re.compile(r"\b(true|false|const|void)\b")


def comparable(name: str) -> str:
    """A kernel's name in a form on which ncu's and PyTorch's profiler's demanglers agree: the
    function and its template arguments, without its return type, its scope, parameter lists,
    casts, literal suffixes, 'const', 'void' or spaces."""
    name = _LAMBDA.sub(lambda m: f"lambda#{m.group(1) or m.group(2)}", demangled(name))
    name = _ANONYMOUS.sub("anonymous", _CAST.sub("", name))
    name = _SUFFIX.sub(r"\1", name)
    name = _WORD.sub(lambda m: _WORDS[m.group(1)], name)
    return re.sub(r"\s+", "", _function(_outside(name, "(", ")").strip()))


def _function(name: str) -> str:
    """The function in a name without parameter lists: what follows the last space or '::' outside
    every '<...>'. Scope and return type go: ncu writes cuBLAS's gemv kernel's return type with the
    template's own names ('enable_if<!T7, void>::type') and drops a namespace of its scope
    ('internal::kernel<...>' where the profiler has 'internal::gemvx::kernel<...>';
    tests/data/gpu-2026-11-26c-h200)."""
    depth, start = 0, 0
    for at, char in enumerate(name):
        if char == "<":
            depth += 1
        elif char == ">" and depth:
            depth -= 1
        elif depth == 0 and (char.isspace() or name.startswith("::", at)):
            start = at + (2 if char == ":" else 1)
    return name[start:]


def _outside(name: str, opening: str, closing: str) -> str:
    """``name`` without what its ``opening``/``closing`` brackets enclose, nested ones included."""
    depth, out = 0, []
    for char in name:
        depth += char == opening
        if depth == 0:
            out.append(char)
        depth -= char == closing and depth > 0
    return "".join(out)


class Kernel(NamedTuple):
    algorithm: str | None  # None: not a convolution's or a GEMM's kernel (an element-wise op's, say)
    role: str  # math, transform, reduction, fill, copy, offsets, epilogue, other
    tensor_cores: bool


# A copy or a fill as CUPTI's activity records (and so PyTorch's profiler) name them: "Memcpy DtoD
# (Device -> Device)", "Memset (Device)". Device time of a layer phase, but no kernel: ncu, CUPTI's
# range profiler and nvprof's metrics count kernels only.
COPY, FILL = r"^Memcpy \w+ \(", r"^Memset \("

# (pattern, algorithm, role), the first match wins: specific names before the generic GEMM ones.
RULES: tuple[tuple[str, str | None, str], ...] = (
    # tracker's own kernels (kernels/*.cu), by their exact names
    (r"^winograd_(input|output)_a\d+$", "winograd_nonfused", "transform"),
    # the filter transform alone says no more than Winograd: the retired winograd_fused launched it
    # beside its fused kernel (winograd_fused_a4, which the libraries' rule below reads as fused math)
    (r"^winograd_filter_a\d+$", "winograd", "transform"),
    (r"^fft_(filter|input|output)_n\d+$", "fft", "transform"),
    (r"^conv2d_\w+_implicit$", "implicit_gemm", "math"),
    (r"^conv2d_\w+_(global|constant)$", "direct", "math"),
    (r"^(splitk_reduce|bias_grad)$", None, "reduction"),
    (r"^convtranspose_scatter$", "gemm", "transform"),  # places a transposed convolution's GEMM columns
    # the copies and fills a profiler's trace logs beside the kernels (``is_transfer``)
    (COPY, None, "copy"),
    (FILL, None, "fill"),
    # the libraries'
    (r"fft\d?d?_?(r2c|c2r)|fft2d|fft1d|flip_filter|vector_fft", "fft", "transform"),
    (r"winograd(Forward|Wgrad)(Data|Filter|Output|Delta)", "winograd_nonfused", "transform"),
    (r"winograd", "winograd", "math"),
    (
        r"precomputed_convolve_sgemm|scudnn_\d+x\d+_(relu_)?(\w+_)?(interior|small|medium|large)",
        "implicit_precomp_gemm",
        "math",
    ),
    (r"computeOffsetsKernel", "implicit_precomp_gemm", "offsets"),
    (
        r"implicit_convolve_[sh]gemm|xmma_(fprop|dgrad|wgrad)_implicit_gemm|implicit_gemm|dgrad_engine|"
        r"dgrad2d_alg1|wgrad_alg[01]_engine|dgrad_1x1",
        "implicit_gemm",
        "math",
    ),
    (r"explicit_convolve_sgemm", "gemm", "math"),
    (r"im2col|col2im", "gemm", "transform"),  # an explicit GEMM's unfolding and folding
    (r"grouped_direct|[Dd]epthwise", "direct", "math"),
    (r"cgemm", "fft", "math"),  # complex GEMM: an FFT convolution's element-wise products
    (r"[sdh]gemm|gemv|gemmk|gemm_|tensorop|xmma_gemm|cutlass", "gemm", "math"),
    (r"nchwToNhwc|nhwcToNchw|[Tt]ranspose|ShuffleInTensor", None, "transform"),
    (r"splitK[Rr]educe|reduce_kernel|[Rr]eduction", None, "reduction"),
    (r"[Ff]ill|memset|[Ss]etTensor|scalePackedTensor", None, "fill"),
    (r"epilogue", None, "epilogue"),  # cuBLASLt's bias or activation after a GEMM
)
_TRANSFER = re.compile(f"{COPY}|{FILL}")


def is_transfer(name: str) -> bool:
    """Whether a launch log's entry is a copy or a fill, not a kernel."""
    return _TRANSFER.match(name) is not None


_COMPILED = tuple((re.compile(pattern), algorithm, role) for pattern, algorithm, role in RULES)
_TENSOR_CORES = re.compile(r"tensorop|tensor\d+x\d+|hmma|s1688|s16816|[hi]884|_(tf32|f16|bf16)(f16|f32|bf16|tf32)")
# which algorithm a layer phase ran when its launches name several: the most specific first
PRIORITY = ("fft", "winograd_nonfused", "winograd", "implicit_precomp_gemm", "implicit_gemm", "direct", "gemm")


def classify(name: str) -> Kernel:
    """The algorithm and role of one kernel, from its (demangled or mangled) name."""
    tensor_cores = bool(_TENSOR_CORES.search(name))
    for pattern, algorithm, role in _COMPILED:
        if pattern.search(name):
            return Kernel(algorithm, role, tensor_cores)
    return Kernel(None, "other", tensor_cores)


def traffic(records: Iterable[Any], role: str) -> tuple[float, int, int]:
    """(ms, bytes, launches) of the launches in ``records`` (LaunchRecords, timed) whose kernels play
    ``role`` (``classify``): what a phase's transforms took, against the arrays they were handed."""
    mine = [r for r in records if classify(r.kernel).role == role]
    return sum(r.time_ms or 0.0 for r in mine), sum(r.array_bytes for r in mine), len(mine)


def phase_algorithm(names: Iterable[str]) -> str | None:
    """The algorithm a layer phase ran, from the names of all its launches; None if none says."""
    found = {classify(name).algorithm for name in names}
    return next((algorithm for algorithm in PRIORITY if algorithm in found), None)


# The algorithm a launch's kernel names say -> the analytic model's (tracker/model/algorithms.py);
# our non-fused Winograd's output tile is its variant's (tracker.ops.winograd.modelled).
MODELLED = {
    "direct": "direct",
    "implicit_gemm": "implicit_gemm",
    "implicit_precomp_gemm": "implicit_gemm",
    "gemm": "gemm",
    "fft": "fft",
}
