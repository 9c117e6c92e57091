"""The tiled GEMM that every matrix-shaped variant launches (kernels/common.cuh, kernels/gemm.cu):
its schedules (``Tile``: CTA tile, k-tile, pipeline stages, warp layout, register policy,
split-K), handed to NVRTC as ``-D`` options from here, its launch geometry, the split-K reduction
and the bias gradient. Not an op itself: conv and linear launch it.

C[m][n] = sum_k A(m, k) B(k, n) in CTA tiles of TILE_M x TILE_N and k-tiles of TILE_K; each
thread accumulates a THREAD_M x THREAD_N (8 x 8) register block, so a CTA has
(TILE_M / 8) x (TILE_N / 8) threads. ``tracker tune`` searches ``SHAPES`` (with split-K slices),
then ``Tile.neighbours`` of the fastest, per layer phase and GPU; without a tuning, ``DEFAULT``
runs, splitting K by ``Tile.splits``' rule, its CTA tile ``fitted`` to the GEMM's M and N where a
variant says them (``Variant.gemm``: the Winograd and FFT variants' batched GEMMs, whose M and
N are channel counts): a rule by tile utilisation, not yet measured on a GPU.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from tracker.errors import TrackerError
from tracker.ops.launch import (
    DEFAULT_SHARED,
    SM_REGISTERS,
    THREADS,
    WAVE,
    Backend,
    LaunchRecord,
    blocks,
    tiles,
    wave_efficiency,
)
from tracker.ops.registry import Launcher, PhaseLaunch, launch

THREAD = 8  # THREAD_M = THREAD_N: outputs per thread along each side (common.cuh's register block)
PAD = 4  # floats after each k-row of a shared tile (common.cuh's TILE_PAD: no bank conflicts, rows 16-byte aligned)
STAGES = (2, 3, 4)  # k-tiles in the shared-memory ring: 2 is double buffering
WARP_ROWS = (4, 8)  # a warp's threads as 4 x 8 (32 x 64 outputs) or 8 x 4 (64 x 32)
# __launch_bounds__' CTAs per SM: 0 leaves registers to ptxas's own trade-off (it may hold a
# 256-thread tile to 128 for two CTAs an SM); 1 gives the code all it asks for (one CTA); 2 caps a
# 256-thread tile at 128, spilling if it must.
MIN_CTAS = (0, 1, 2)
MAX_REGISTERS = 255  # per thread
# Split-K cuts the reduction into the fewest slices that keep WAVE_TARGET of the GPU's CTA slots
# busy over whole waves (the backend's ``slots``: SMs x CTAs of the build an SM holds), each slice
# MIN_K_TILES k-tiles at least; `tracker tune` measures what suits a shape best.
WAVE_TARGET = 0.9
MIN_K_TILES = 16


@dataclass(frozen=True)
class Tile:
    """A GEMM schedule: CTA tiles of ``m`` x ``n`` outputs, k-tiles of ``k`` in a ring of
    ``stages`` shared-memory buffers, warps of ``warp_rows`` x (32 / warp_rows) threads, registers
    for ``min_ctas`` CTAs an SM (0: ptxas's choice; see MIN_CTAS), and ``split`` slices of the
    reduction (split-K; 0: as many as ``splits`` deems right for the shape)."""

    m: int = 128
    n: int = 128
    k: int = 8
    split: int = 0
    stages: int = 2
    warp_rows: int = 4
    min_ctas: int = 0

    @property
    def threads(self) -> int:
        return (self.m // THREAD) * (self.n // THREAD)

    @property
    def shared_bytes(self) -> int:
        """The A and B rings in shared memory (static: at most DEFAULT_SHARED a CTA)."""
        return self.stages * self.k * (self.m + self.pad(self.m) + self.n + self.pad(self.n)) * 4

    def pad(self, width: int) -> int:
        """The most floats common.cuh's row_pad puts after a shared k-row ``width`` wide: TILE_PAD,
        or where fewer than 32 loader lanes cover a row, enough to put rows that many banks apart."""
        lanes = self.threads // self.k if self.k else 0
        return PAD if lanes >= 32 or lanes <= 0 else max(PAD, (lanes - width) % 32)

    @property
    def masked_shared_bytes(self) -> int:
        """shared_bytes plus the ring the fused backward copies the ReLU's output into (common.cuh's
        RELU_MASK build), as wide as the wider operand."""
        return self.shared_bytes + self.stages * self.k * max(self.m + self.pad(self.m), self.n + self.pad(self.n)) * 4

    @property
    def valid(self) -> bool:
        """Whether common.cuh compiles it: warps tile the CTA, and the rings fit in shared memory."""
        if min(self.m, self.n, self.k, self.warp_rows) < 1 or 32 % self.warp_rows:  # 0x0x0: nothing to divide by
            return False
        warp_cols = 32 // self.warp_rows
        warps_tile = self.m % (self.warp_rows * THREAD) == 0 and self.n % (warp_cols * THREAD) == 0  # so threads >= 1
        if not (warps_tile and self.threads % self.k == 0):  # so lanes >= 1
            return False
        lanes = self.threads // self.k  # common.cuh's LANES
        return (
            self.m % lanes == 0
            and self.n % lanes == 0
            and self.stages >= 2
            and self.min_ctas >= 0
            and self.split >= 0
            and self.fits()
        )

    def check(self) -> Tile:
        """This tile, if common.cuh builds it; else a one-line error saying why not."""
        if not self.valid:
            raise TrackerError(
                f"{self.label}: the GEMM core cannot build it (sizes are positive, warps must tile "
                f"the CTA, the rings fit {self.shared_bytes:,} of at most {DEFAULT_SHARED:,} bytes of "
                "shared memory)"
            )
        return self

    def fits(self, masked: bool = False) -> bool:
        """Whether its rings fit in a CTA's static shared memory (``masked``: with the fused
        backward's mask ring too)."""
        return (self.masked_shared_bytes if masked else self.shared_bytes) <= DEFAULT_SHARED

    @property
    def caps_registers(self) -> bool:
        """Whether min_ctas caps registers below what a thread may have anyway."""
        return self.min_ctas > 0 and SM_REGISTERS // (self.min_ctas * self.threads) < MAX_REGISTERS

    def neighbours(self) -> tuple[Tile, ...]:
        """The valid tiles that differ from this one in pipeline stages, warp layout or CTAs per
        SM alone (a register cap that binds nothing is no neighbour): what `tracker tune` tries
        around the fastest tile shape."""
        capped = (replace(self, min_ctas=c) for c in MIN_CTAS if c != self.min_ctas)
        binding = (t for t in capped if t.min_ctas <= 1 or t.caps_registers)  # a cap that binds nothing: no news
        return tuple(
            t
            for t in (
                *(replace(self, stages=s) for s in STAGES if s != self.stages),
                *(replace(self, warp_rows=w) for w in WARP_ROWS if w != self.warp_rows),
                *binding,
            )
            if t.valid
        )

    def defines(self) -> dict[str, int]:
        """The -D sizes kernels/common.cuh compiles this tile with."""
        return {
            "TILE_M": self.m,
            "TILE_N": self.n,
            "TILE_K": self.k,
            "THREAD_M": THREAD,
            "THREAD_N": THREAD,
            "GEMM_THREADS": self.threads,
            "STAGES": self.stages,
            "WARP_ROWS": self.warp_rows,
            "TILE_PAD": PAD,
            "MIN_CTAS": self.min_ctas,
        }

    @property
    def overrides(self) -> tuple[tuple[str, int], ...]:
        """The -D sizes that differ from the default build's (empty for DEFAULT's tile): what a
        backend compiles a separate module for."""
        default = DEFAULT.defines()
        return tuple((name, v) for name, v in self.defines().items() if default[name] != v)

    def splits(self, M: int, N: int, K: int, slots: int, batch: int = 1) -> int:
        """How many slices the reduction is cut into: ``split`` if set; else the fewest whose CTAs
        (``batch`` GEMMs of the shape in one launch count together) keep WAVE_TARGET of ``slots``
        busy over whole waves (``wave_efficiency``), each slice MIN_K_TILES k-tiles at least (the
        last what is left), or the busiest where none does. Never an empty slice."""
        return _splits(self, tiles(K, self.k), tiles(M, self.m) * tiles(N, self.n) * batch, slots)

    def k_chunk(self, K: int, splits: int) -> int:
        """k per slice: a whole number of k-tiles."""
        return tiles(tiles(K, self.k), splits) * self.k

    def grid(self, M: int, N: int, splits: int = 1, batch: int = 1) -> tuple[int, int, int]:
        """(column tiles, row tiles of every item of a batch in turn, split-K slices)."""
        return tiles(N, self.n), tiles(M, self.m) * batch, splits

    def splits_in(self, log: list[LaunchRecord]) -> int:
        """How many split-K slices this tile's GEMM launches in a backend's log ran: their grid's z
        (``grid``). The other launches of its block size (the reduction, the bias gradient) have z 1."""
        return max(r.grid[2] for r in log if r.block[0] == self.threads)

    @property
    def label(self) -> str:
        """'128x64x8', then what differs from the defaults: '/stages3', '/warp8x4', '/ctas2', '/split4'."""
        cols = 32 // self.warp_rows if self.warp_rows > 0 else 0  # warp0x0 is shown, then refused by ``check``
        extra = (
            (f"/stages{self.stages}" if self.stages != Tile.stages else "")
            + (f"/warp{self.warp_rows}x{cols}" if self.warp_rows != Tile.warp_rows else "")
            + (f"/ctas{self.min_ctas}" if self.min_ctas != Tile.min_ctas else "")
            + (f"/split{self.split}" if self.split else "")
        )
        return f"{self.m}x{self.n}x{self.k}{extra}"

    @classmethod
    def parse(cls, label: str) -> Tile:
        """'128x64x8/stages3/split4' -> Tile(128, 64, 8, split=4, stages=3); the inverse of ``label``."""
        shape, *extras = label.split("/")
        sizes = shape.split("x")
        if len(sizes) != 3 or not all(v.isdigit() for v in sizes):
            raise ValueError(f"{label!r}: the tile shape is MxNxK, e.g. 128x64x8")
        tile = cls(*(int(v) for v in sizes))
        for extra in extras:
            name = extra.rstrip("0123456789x")
            value = extra[len(name) :]
            if name not in ("split", "stages", "warp", "ctas"):
                raise ValueError(f"{label!r}: {extra!r} is not stagesN, warpRxC, ctasN or splitN")
            if not re.fullmatch(r"\d+" + (r"(x\d+)?" if name == "warp" else ""), value):
                raise ValueError(f"{label!r}: {extra!r} needs a number, e.g. stages3, warp8x4")
            if name == "split":
                tile = replace(tile, split=int(value))
            elif name == "stages":
                tile = replace(tile, stages=int(value))
            elif name == "warp":
                tile = replace(tile, warp_rows=int(value.split("x")[0]))
            else:
                tile = replace(tile, min_ctas=int(value))
        return tile


@cache  # once per shape: a launch asks every iteration
def _splits(tile: Tile, k_tiles: int, ctas: int, slots: int) -> int:
    def cut(want: int) -> int:  # slices of whole k-tiles: ceil(k_tiles / want) a slice
        return tiles(k_tiles, tiles(k_tiles, max(1, min(want, k_tiles))))

    if tile.split:
        return cut(tile.split)
    cuts = dict.fromkeys(cut(s) for s in range(1, k_tiles // MIN_K_TILES + 2) if tiles(k_tiles, s) >= MIN_K_TILES)
    cuts = cuts or {1: None}
    busy = {s: wave_efficiency(ctas * s, slots) for s in cuts}
    return next((s for s in busy if busy[s] >= WAVE_TARGET), max(busy, key=busy.__getitem__))


# The default schedule holds every kernel to 128 registers, two CTAs an SM, whatever a CuPy's
# NVRTC would choose (the H200's built the implicit conv at 143, one CTA an SM): on the H100, the
# cap ran each of the 9 conv phases its tuning race timed 1.15-1.35x faster (tests/test_recordings.py).
DEFAULT = Tile(min_ctas=2)
# The tile shapes `tracker tune` tries (each also with split-K slices, see tune.candidates): big
# tiles for big layers, small ones where the output has few tiles.
SHAPES = (
    Tile(128, 128, 8),
    Tile(128, 128, 16),
    Tile(128, 64, 8),
    Tile(64, 128, 8),
    Tile(64, 64, 8),
    Tile(64, 64, 16),
    Tile(32, 64, 8),
)
# The CTA tile sides the default plan fits a GEMM's M and N with (``fitted``), the default's first:
# each tile shape they make is one `tracker tune` runs (SHAPES). The smaller side runs only where the
# larger would leave more than IDLE of that dimension padding, and the smaller less: a 64-wide
# tile moves twice the operand bytes per output, which a large dimension's few padded columns
# do not repay.
SIDES = (128, 64)
IDLE = 0.1


def fitted(M: int, N: int) -> Tile:
    """DEFAULT with each side of its CTA tile fitted to the GEMM's M and N (``SIDES``, ``IDLE``):
    M = 192 runs 3 tiles of 64 rows rather than 2 of 128 (a quarter of their rows padding). By
    tile utilisation alone: not yet measured on a GPU."""
    return replace(DEFAULT, m=_side(M), n=_side(N))


def _side(extent: int) -> int:
    def idle(side: int) -> float:
        return 1 - extent / (tiles(extent, side) * side)

    large, small = SIDES
    return small if idle(large) > IDLE and idle(small) < idle(large) else large


# The fused variants' backward reads the output gradient through the ReLU mask: their GEMMs are
# built with RELU_MASK 1 (common.cuh), every other build with 0.
RELU_MASK = "RELU_MASK"
MASKED = ((RELU_MASK, 1),)
DEFINES = {**DEFAULT.defines(), RELU_MASK: 0}


@dataclass(frozen=True)
class Out:
    """Where a GEMM's C (M rows) goes and what its epilogue does (common.cuh's Store): ``c`` is
    images of M x ``per_image`` (the batch folded into C's columns; a plain matrix is one image),
    plus bias (per row or per column), ReLU, and accumulate into C."""

    c: Any
    per_image: int
    bias: Any = None
    bias_per_row: bool = False
    relu: bool = False
    accumulate: bool = False
    stride: int = 0  # a batched GEMM's: floats from one item's C to the next


def leaves_out(launch: PhaseLaunch, tile: Tile | None) -> bool:
    """Whether ``tile`` cannot build ``launch``: a fused backward (the RELU_MASK build) whose mask
    ring does not fit beside the tile's rings (``run`` refuses it)."""
    return (
        tile is not None and launch.tunable and dict(launch.defines).get(RELU_MASK) == 1 and not tile.fits(masked=True)
    )


def run(
    b: Backend,
    source: str,
    kernel: str,
    tile: Tile,
    M: int,
    N: int,
    K: int,
    args: Callable[[Any, int], tuple],
    out: Out,
    masked: bool = False,
    batch: int = 1,
) -> None:
    """Launch a GEMM-shaped kernel of ``tile`` over C (M x N) with reduction K, ``batch`` of them
    (``Gemm.batch``); ``args(partial, k_chunk)`` are its arguments, which pass a ReLU mask exactly
    when ``masked`` (the RELU_MASK build). With more than one split, the splits' partial products
    go to a scratch array and splitk_reduce sums them into ``out``."""
    if masked and not tile.fits(masked=True):
        raise ValueError(
            f"tile {tile.label} with the ReLU mask's ring needs {tile.masked_shared_bytes:,} of at "
            f"most {DEFAULT_SHARED:,} bytes of shared memory"
        )
    defines = tile.overrides + (MASKED if masked else ())
    splits = tile.splits(M, N, K, b.slots(source, kernel, tile.threads, defines), batch)
    chunk = tile.k_chunk(K, splits)
    partial = b.empty((batch * splits, M, N)) if splits > 1 else None
    b.launch(source, kernel, tile.grid(M, N, splits, batch), (tile.threads,), args(partial, chunk), defines=defines)
    if splits > 1:
        reduce_splits(b, partial, splits, out, M, N, batch)


def reduce_splits(b: Backend, partial: Any, splits: int, out: Out, M: int, N: int, batch: int = 1) -> None:
    """splitk_reduce: ``out`` = the sum of ``partial``'s ``splits`` slices of each of ``batch`` M x N
    items, in slice order (deterministic), through ``out``'s epilogue."""
    b.launch(
        "gemm.cu",
        "splitk_reduce",
        (blocks(batch * M * N),),
        (THREADS,),
        (
            partial,
            splits,
            out.c,
            M,
            N,
            out.per_image,
            out.bias,
            int(out.bias_per_row),
            int(out.relu),
            int(out.accumulate),
            batch,
            out.stride,
        ),
    )


@dataclass(frozen=True)
class Gemm:
    """One dense GEMM launch (kernels/gemm.cu): C (M x N) = A (M x K) times B (K x N), A and B
    row-major with leading dimensions ``lda`` and ``ldb`` as the kernel reads them (``gemm_tn``
    reads A transposed, ``gemm_nt`` B; an ``_images`` kernel reads one operand as images of
    rows x ld, see gemm.cu). ``a_mask``: read A through a ReLU mask (the fused backward);
    ``bias`` per row or per column; ``relu`` on the result; ``accumulate`` adds to C;
    ``per_image``: C is images of M x per_image (0: a plain matrix). ``batch``: that many GEMMs
    of the shape in one launch (a ``_batched`` kernel), item i reading A and B ``stride_a`` and
    ``stride_b`` floats on and writing the i-th M x N matrix of C."""

    kernel: str  # gemm_nn, gemm_tn, gemm_nt, gemm_tn_images, gemm_nt_images, gemm_nn_batched, gemm_nt_batched
    M: int
    N: int
    K: int
    lda: int
    ldb: int
    bias_per_row: bool = False
    relu: bool = False
    accumulate: bool = False
    per_image: int = 0
    batch: int = 1
    stride_a: int = 0
    stride_b: int = 0

    @property
    def batched(self) -> bool:
        """Whether its kernel runs a batch (takes the items' strides: gemm.cu's BATCH_ITEM)."""
        return self.kernel.endswith("_batched")

    def __post_init__(self) -> None:
        # the kernel reads its item from the grid (gemm.cu's BATCH_ITEM): a batch needs a _batched kernel
        if self.batch > 1 and not self.batched:
            raise ValueError(f"{self.kernel} runs one GEMM, not a batch of {self.batch}: use a _batched kernel")

    def launch(
        self, b: Backend, a: Any, bmat: Any, c: Any, a_mask: Any = None, bias: Any = None, tile: Tile = DEFAULT
    ) -> None:
        out = Out(
            c,
            self.per_image or self.N,
            bias,
            self.bias_per_row,
            self.relu,
            self.accumulate,
            stride=self.M * self.N if self.batched else 0,
        )
        strides = (self.stride_a, self.stride_b, out.stride) if self.batched else ()
        run(
            b,
            "gemm.cu",
            self.kernel,
            tile,
            self.M,
            self.N,
            self.K,
            lambda partial, chunk: (
                a,
                a_mask,
                bmat,
                c,
                partial,
                self.M,
                self.N,
                self.K,
                self.lda,
                self.ldb,
                chunk,
                out.per_image,
                bias,
                int(self.bias_per_row),
                int(self.relu),
                int(self.accumulate),
                *strides,
            ),
            out,
            masked=a_mask is not None,
            batch=self.batch,
        )


SPLITK_REDUCE = "gemm.cu:splitk_reduce"
# The bias gradient's kernels: its partial sums, then (with more than one run of images) their reduction.
BIAS_GRAD = ("gemm.cu:bias_grad", SPLITK_REDUCE)
BIAS_PER_THREAD = 16  # elements of dy each thread of bias_grad adds at least: the partials stay few


def tiled(run: Launcher, *kernels: str, note: str = "", masked: bool = False) -> PhaseLaunch:
    """A PhaseLaunch built on this GEMM: its launcher takes ``tile``, which `tracker tune` chooses, and
    it may end in the split-K reduction. ``masked``: its GEMM reads an operand through the ReLU
    mask (``run(masked=True)``), so it runs the RELU_MASK build."""
    return launch(run, *kernels, SPLITK_REDUCE, note=note, tunable=True, defines=MASKED if masked else ())


# What the fused variants (conv and linear) do with the GEMM's epilogue and loaders.
FUSED_FWD = "bias + ReLU in the GEMM epilogue; the ReLU layer launches nothing"
FUSED_BWD = "reads dy through the ReLU mask, applied in shared memory (dy and y both copied with cp.async)"


def _bias_across(K: int, L: int) -> int:
    """bias_grad's blocks across the channels: one a channel, or for L = 1 one a THREADS channels."""
    return K if L > 1 else tiles(K, THREADS)


def bias_rows(N: int, K: int, L: int) -> int:
    """Images a block of bias_grad adds: few enough for about WAVE blocks in all (K of them, or
    ceil(K / THREADS) for L = 1, per run of images), each thread adding at least BIAS_PER_THREAD
    elements (a block's threads share its images' rows; for L = 1 each thread has a column)."""
    lanes = THREADS if L > 1 else 1  # threads that share a channel's rows in a block
    return min(N, max(tiles(N, tiles(WAVE, _bias_across(K, L))), tiles(BIAS_PER_THREAD * lanes, L)))


def bias_grad(b: Backend, dy: Any, relu_y: Any, db: Any, N: int, K: int, L: int) -> None:
    """db[k] = sum over images and positions of dy (N x K x L; through the ReLU mask where given):
    bias_grad over (channels, runs of images), and with more than one run, splitk_reduce adding
    the runs' partials in order (deterministic, as split-K's)."""
    rows = bias_rows(N, K, L)
    runs = tiles(N, rows)
    out = b.empty((runs, K)) if runs > 1 else db
    b.launch("gemm.cu", "bias_grad", (_bias_across(K, L), runs), (THREADS,), (dy, relu_y, out, N, K, L, rows))
    if runs > 1:  # a 1 x K GEMM's split-K reduction, the runs its splits
        reduce_splits(b, out, runs, Out(db, K), 1, K)
