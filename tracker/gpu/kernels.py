"""The kernel table: which CUDA kernels each (op, phase, variant) launches, and how they compile.

Pure Python (no CuPy): the GPU runner, the compile check and ``tracker kernels`` all read this
one table, and ``compile_options`` is the one place compile flags are made, for CuPy at run time
and for NVRTC in the compile check alike, so the two cannot drift.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from tracker.variants import VARIANTS

KERNEL_DIR = Path(__file__).resolve().parents[2] / "kernels"
HEADERS = ("common.cuh",)
ARCHS = ("sm_80", "sm_90")
L1_POLICIES = ("ca", "cg")  # -dlcm=ca caches global loads in L1; cg bypasses L1 (paper 003's flag)
PHASES_OF = {op: ("fwd", "bwd_data", "bwd_weight") if op in ("conv", "linear") else ("fwd", "bwd_data")
             for op in VARIANTS}


@dataclass(frozen=True)
class Variant:
    op: str
    phase: str
    variant: str
    kernels: tuple[tuple[str, str], ...]  # (source file, kernel name), in launch order
    note: str = ""

    @property
    def key(self) -> str:
        return f"{self.op}/{self.phase}/{self.variant}"

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(source for source, _ in self.kernels))


def _k(*pairs: str) -> tuple[tuple[str, str], ...]:
    """'conv2d.cu:im2col', 'gemm.cu:gemm_nn' -> (('conv2d.cu', 'im2col'), ('gemm.cu', 'gemm_nn'))."""
    return tuple(tuple(p.split(":")) for p in pairs)


BIAS = "gemm.cu:bias_grad"
_TABLE = {
    ("conv", "fwd"): {
        "global": _k("conv2d.cu:conv2d_fwd_global"),
        "constant": _k("conv2d.cu:conv2d_fwd_constant"),
        "shared": _k("conv2d.cu:conv2d_fwd_implicit"),
        "gemm": _k("conv2d.cu:im2col", "gemm.cu:gemm_nn"),
        "fused": _k("conv2d.cu:conv2d_fwd_implicit"),
    },
    ("conv", "bwd_data"): {
        "global": _k("conv2d.cu:conv2d_bwd_data_global"),
        "constant": _k("conv2d.cu:conv2d_bwd_data_constant"),
        "shared": _k("conv2d.cu:conv2d_bwd_data_implicit"),
        "gemm": _k("gemm.cu:gemm_tn", "conv2d.cu:col2im"),
        "fused": _k("conv2d.cu:conv2d_bwd_data_implicit"),
    },
    ("conv", "bwd_weight"): {
        "global": _k("conv2d.cu:conv2d_bwd_weight_global", BIAS),
        "constant": _k("conv2d.cu:conv2d_bwd_weight_global", BIAS),
        "shared": _k("conv2d.cu:conv2d_bwd_weight_implicit", BIAS),
        "gemm": _k("conv2d.cu:im2col", "gemm.cu:gemm_nt", BIAS),
        "fused": _k("conv2d.cu:conv2d_bwd_weight_implicit", BIAS),
    },
    ("linear", "fwd"): {
        "global": _k("linear.cu:linear_fwd_global"),
        "shared": _k("gemm.cu:gemm_nt"),
        "fused": _k("gemm.cu:gemm_nt"),
    },
    ("linear", "bwd_data"): {
        "global": _k("linear.cu:linear_bwd_data_global"),
        "shared": _k("gemm.cu:gemm_nn"),
        "fused": _k("gemm.cu:gemm_nn"),
    },
    ("linear", "bwd_weight"): {
        "global": _k("linear.cu:linear_bwd_weight_global", BIAS),
        "shared": _k("gemm.cu:gemm_tn", BIAS),
        "fused": _k("gemm.cu:gemm_tn", BIAS),
    },
    ("relu", "fwd"): {"global": _k("relu.cu:relu_fwd_global")},
    ("relu", "bwd_data"): {"global": _k("relu.cu:relu_bwd_global")},
    ("maxpool", "fwd"): {"global": _k("maxpool.cu:maxpool_fwd_global"), "shared": _k("maxpool.cu:maxpool_fwd_shared")},
    ("maxpool", "bwd_data"): {"global": _k("maxpool.cu:maxpool_bwd_global"),
                              "shared": _k("maxpool.cu:maxpool_bwd_shared")},
    ("lrn", "fwd"): {"global": _k("lrn.cu:lrn_fwd_global"), "shared": _k("lrn.cu:lrn_fwd_shared")},
    ("lrn", "bwd_data"): {"global": _k("lrn.cu:lrn_bwd_global"), "shared": _k("lrn.cu:lrn_bwd_shared")},
    ("softmax", "fwd"): {"global": _k("softmax.cu:softmax_fwd_global"), "shared": _k("softmax.cu:softmax_fwd_shared")},
    ("softmax", "bwd_data"): {"global": _k("softmax.cu:softmax_xent_bwd_global"),
                              "shared": _k("softmax.cu:softmax_xent_bwd_shared")},
}
NOTES = {
    ("conv", "bwd_weight", "constant"): "writes the filters, so nothing to hold in constant memory: runs global",
    ("conv", "fwd", "fused"): "bias + ReLU in the GEMM epilogue; the ReLU layer launches nothing",
    ("conv", "bwd_data", "fused"): "reads dy through the ReLU mask",
    ("conv", "bwd_weight", "fused"): "reads dy through the ReLU mask",
    ("linear", "fwd", "fused"): "bias + ReLU in the GEMM epilogue; the ReLU layer launches nothing",
    ("linear", "bwd_data", "fused"): "reads dy through the ReLU mask",
    ("linear", "bwd_weight", "fused"): "reads dy through the ReLU mask",
}

TABLE: tuple[Variant, ...] = tuple(
    Variant(op, phase, variant, kernels, NOTES.get((op, phase, variant), ""))
    for (op, phase), variants in _TABLE.items()
    for variant, kernels in variants.items()
)
SOURCES: tuple[str, ...] = tuple(dict.fromkeys(source for v in TABLE for source in v.sources))


# What CuPy's RawModule adds to our options (cupy/cuda/compiler.py, _compile_with_cache_cuda),
# besides the device's architecture: the compile check adds it too, so that it compiles exactly
# what runs.
CUPY_ADDS = ("-ftz=true",)


def compile_options(l1_policy: str, arch: str | None = None) -> tuple[str, ...]:
    """NVRTC options for every kernel module. CuPy adds the architecture of the device itself,
    and CUPY_ADDS."""
    if l1_policy not in L1_POLICIES:
        raise ValueError(f"L1 policy {l1_policy!r} is not one of {L1_POLICIES}")
    options = ("--std=c++17", f"--include-path={KERNEL_DIR}", "-lineinfo", "-Xptxas", f"-dlcm={l1_policy}")
    if l1_policy == "cg":  # and no read-only path either (kernels/common.cuh, RESTRICT)
        options += ("-DTRACKER_L1_BYPASS",)
    return options + ((f"--gpu-architecture={arch}",) if arch else ())


def source_text(source: str) -> str:
    """A module's source as compiled, stamped with the hash of the headers it includes: CuPy's
    on-disk cache keys on the source text alone, so a changed header must change the text."""
    text = (KERNEL_DIR / source).read_text()
    if source in HEADERS:
        return text
    stamp = hashlib.sha256(b"".join((KERNEL_DIR / h).read_bytes() for h in HEADERS)).hexdigest()[:16]
    return f"{text}\n// {', '.join(HEADERS)}: sha256 {stamp}\n"


def source_hash(sources: tuple[str, ...]) -> str:
    """A short hash of the sources and the shared headers: what a verification record vouches for."""
    digest = hashlib.sha256()
    for name in sorted({*sources, *HEADERS}):
        digest.update(name.encode() + b"\0" + (KERNEL_DIR / name).read_bytes())
    return digest.hexdigest()[:16]
