"""The GEMM schedules (tracker/ops/gemm.py's Tile) that the tune, kernel and emulation tests run."""

from __future__ import annotations

from tracker.ops.gemm import SHAPES, STAGES, WARP_ROWS, Tile

# The variants that wrap gemm.cu's GEMMs in transforms of their own (the Winograd and FFT):
# their GEMMs run every schedule through the gemm and linear variants, and their transforms take
# no tile, so the per-schedule tests leave them out (test_winograd and test_fft run them).
TRANSFORMS = ("winograd", "winograd_f4", "fft")

# Every schedule class `tracker tune` can run, as code, each at least twice where it can be: every
# tile shape (its thread count and its loaders' trip counts) at the default ring and warp layout;
# each ring depth and the other warp layout on two shapes of different thread counts; and one that
# only `--tile` can ask for (both at once). The full cross (26 schedules) proved nothing these 14
# do not, at twice the compile time (CI in 10 minutes). A register policy (/ctas1,
# /ctas2) changes what ptxas allocates, not the code: test_kernels holds its SASS.
SCHEDULES = (
    *SHAPES,
    Tile(128, 128, 8, stages=3),
    Tile(32, 64, 8, stages=3),  # the ring deeper than two: a 3-deep one
    Tile(64, 64, 16, stages=4),
    Tile(128, 64, 8, stages=4),  # a 4-deep one, a 16-deep k-tile's too
    Tile(128, 128, 16, warp_rows=8),
    Tile(64, 128, 8, warp_rows=8),  # warps as 8 x 4 threads
    Tile(64, 64, 8, stages=4, warp_rows=8),  # both at once: only --tile asks for it
)
RING = Tile(128, 128, 8, stages=3)  # a 3-deep ring: not a power of two


def classes(tiles) -> set[tuple[str, object]]:
    """What a set of schedules covers: each shape, ring depth and warp layout it runs."""
    return (
        {("shape", (t.m, t.n, t.k)) for t in tiles}
        | {("stages", t.stages) for t in tiles}
        | {("warp_rows", t.warp_rows) for t in tiles}
    )


def every_class() -> set[tuple[str, object]]:
    """Every class `tracker tune` can run: each shape, ring depth and warp layout."""
    return (
        {("shape", (t.m, t.n, t.k)) for t in SHAPES}
        | {("stages", s) for s in STAGES}
        | {("warp_rows", w) for w in WARP_ROWS}
    )
