"""The library arm: the same network run by a framework's libraries (PyTorch: cuDNN,
cuBLAS), layer phase by layer phase, under the NVTX names our own kernels' launches carry, so
that the same collectors and the same join trace it.

``torch_net`` builds a tracker network in PyTorch from ``tracker.nets``' one definition;
``torch_run`` runs it on a GPU for pass 1 (the launch log from PyTorch's profiler, read by
``kineto``) and as pass 2's child; ``tracker/kernel_names.py`` reads the algorithm a library ran
from its kernels' names. PyTorch is imported only in ``torch_net`` and ``torch_run``, and only
when used (the torch extra: ``tracker.extras``): this module and ``kineto`` are pure Python.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

from tracker.errors import BackendUnavailable
from tracker.extras import install


def require_torch(what: str = "--impl torch") -> None:
    """Raise, saying how to install it, unless PyTorch imports here."""
    if importlib.util.find_spec("torch") is None:
        raise BackendUnavailable(f"{what} needs PyTorch, which is not installed: {install('torch')}")


def require_torch_cuda(what: str) -> str:
    """Raise unless PyTorch here can run on a CUDA device; return which build it is."""
    require_torch(what)
    import torch

    if not torch.cuda.is_available():
        raise BackendUnavailable(
            f"{what} needs a CUDA build of PyTorch that sees a GPU, and torch {torch.__version__} here does not"
        )
    return f"torch {torch.__version__} with CUDA {torch.version.cuda}"


def versions(tf32: bool, cudnn_benchmark: bool) -> dict:
    """What the library arm ran with, recorded on the run: torch, its CUDA, cuDNN and cuBLAS
    versions (None where this build has none) and the two choices that change which kernels run."""
    import torch

    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "cublas": _cublas(),
        "tf32": tf32,
        "cudnn_benchmark": cudnn_benchmark,
    }


def _cublas() -> str | None:
    """cuBLAS's version as its pip wheel names it (PyTorch's CUDA builds load it from there)."""
    for name in ("nvidia-cublas", "nvidia-cublas-cu13", "nvidia-cublas-cu12", "nvidia-cublas-cu11"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None
