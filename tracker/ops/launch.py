"""What every launcher speaks: the ``Backend`` it launches on, the ``Arrays`` of one layer, kernel
struct arguments, and grid arithmetic.

Backend-neutral and free of CuPy: the CuPy backend (tracker/gpu/cupy_backend.py) runs the
launches on a GPU; the tests run the same launches on a CPU emulation of CUDA (tests/emu).
Arrays are NCHW float32 (labels and max-pool indices int32); launchers write into the output
arrays they are given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

THREADS = 256  # threads per block of the grid-stride kernels (their bodies read blockDim)
MAX_BLOCKS = 65535
WAVE = 1024  # blocks that fill a large GPU several times over: a small problem is cut into more blocks
DEFAULT_SHARED = 48 * 1024  # dynamic shared memory a block gets without opting in for more
SM_REGISTERS = 64 * 1024  # 32-bit registers per SM (sm_80, sm_90)


def blocks(n: int, per_block: int = THREADS) -> int:
    """Blocks of a grid-stride loop over ``n`` items: enough for one item a thread, at most 65535."""
    return max(1, min(-(-n // per_block), MAX_BLOCKS))


def tiles(n: int, tile: int) -> int:
    return -(-n // tile)


def wave_efficiency(ctas: int, slots: int) -> float:
    """The share of the GPU's CTA slots (``slots``: SMs x CTAs of the build an SM holds at once) a
    grid of ``ctas`` keeps busy over its waves: the last wave's empty slots idle."""
    return ctas / (tiles(ctas, slots) * slots)


@dataclass(frozen=True)
class Struct:
    """A kernel's struct argument: C field names and types ('i' int32, 'f' float32), in order."""

    name: str
    fields: tuple[tuple[str, str], ...]
    values: tuple

    def numpy(self) -> Any:
        import numpy as np

        dtype = np.dtype([(n, np.int32 if t == "i" else np.float32) for n, t in self.fields], align=True)
        return np.array(self.values, dtype=dtype)[()]


@dataclass
class Arrays:
    """The device arrays one layer's phases read and write, by role. ``x`` is the layer's input,
    ``y`` its output (and, for a fused conv or linear, the ReLU mask its backward reads); ``dy``
    and ``dx`` their gradients; ``w``, ``bias``, ``dw``, ``db`` its parameters and theirs;
    ``labels`` and ``loss`` the loss layer's (softmax: int32 class per image; sigmoid: float32
    targets of the output's shape); ``x2`` and ``dx2`` a second input and its gradient (concat);
    ``mean`` and ``invstd`` what a batch norm's forward saves for its backward, and
    ``running_mean`` and ``running_var`` the statistics it updates (each (C,)); ``argmax`` what a
    max-pool's forward saves for its backward where its variant saves it (int32, the output's
    shape: each window's maximum as an offset in its image's plane or volume). Roles a layer
    lacks stay None."""

    x: Any = None
    y: Any = None
    dy: Any = None
    dx: Any = None
    w: Any = None
    bias: Any = None
    dw: Any = None
    db: Any = None
    labels: Any = None
    loss: Any = None
    x2: Any = None
    dx2: Any = None
    mean: Any = None
    invstd: Any = None
    running_mean: Any = None
    running_var: Any = None
    argmax: Any = None


@dataclass
class LaunchRecord:
    """One kernel launch as a backend logs it; ``time_ms`` is filled in after a synchronize.
    ``grid`` and ``block`` are always three long, as CUDA's dim3 is, however the launch spelled
    them: every backend logs the same record (the emulator once padded, CuPy's did not)."""

    source: str
    kernel: str
    grid: tuple
    block: tuple
    shared_bytes: int
    registers: int | None
    context: Any = None  # what the caller was doing (the executor: its Step)
    start: Any = None
    end: Any = None
    time_ms: float | None = None
    start_ms: float | None = None  # when it began, after the first launch the log holds began (CUDA events)
    array_bytes: int = 0  # of the device arrays it was handed (tracker.ops.contract.array_bytes)

    def __post_init__(self) -> None:
        self.grid, self.block = dim3(self.grid), dim3(self.block)


def dim3(sizes: tuple) -> tuple[int, int, int]:
    """(x,) or (x, y) or (x, y, z) -> (x, y, z), the missing sizes 1."""
    x, y, z = (*sizes, 1, 1)[:3]
    return x, y, z


class Backend(Protocol):
    """Launches kernels (logging a LaunchRecord, tagged with ``context``, to ``log``), allocates.
    ``defines``: -D sizes that differ from the registry's (a GEMM tile `tracker tune` tries); the
    module is compiled once per distinct set.

    Arrays are the backend's own device arrays: ``asarray`` copies a host array to the device
    (keeping its dtype, as CuPy does), ``empty`` allocates float32, ``asnumpy`` copies back. A
    launch's array arguments and a constant's source must be device arrays, and every launch and
    constant keeps the contract of tracker/ops/contract.py, which each backend checks. Both
    backends (tracker/gpu/cupy_backend.py, tests/emu/emulator.py) are checked against this
    protocol by mypy."""

    log: list[LaunchRecord]
    context: Any

    def launch(
        self,
        source: str,
        kernel: str,
        grid: tuple,
        block: tuple,
        args: tuple,
        shared_bytes: int = 0,
        defines: tuple[tuple[str, int], ...] = (),
    ) -> None: ...

    def empty(self, shape: tuple) -> Any: ...

    def asarray(self, array: Any) -> Any: ...

    def asnumpy(self, array: Any) -> Any: ...

    def to_constant(self, source: str, symbol: str, array: Any) -> None: ...

    def slots(self, source: str, kernel: str, threads: int, defines: tuple[tuple[str, int], ...] = ()) -> int:
        """The CTAs of ``kernel``'s build (``threads`` a CTA) the GPU holds at once: its SMs times
        the CTAs an SM holds, as the occupancy calculator reads the build's registers and shared
        memory. What split-K sizes its grids to (``gemm.Tile.splits``)."""
        ...

    def synchronize(self) -> None: ...
