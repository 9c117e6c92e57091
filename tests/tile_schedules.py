"""The GEMM schedules (tracker/ops/gemm.py's Tile) that the tune, kernel and emulation tests run."""

from __future__ import annotations

from tracker.ops.gemm import SHAPES, Tile

# The variants that wrap gemm.cu's GEMMs in transforms of their own (issue 30's Winograd and FFT):
# their GEMMs run every schedule through the gemm and linear variants, and their transforms take
# no tile, so the per-schedule tests leave them out (test_winograd and test_fft run them).
TRANSFORMS = ("winograd", "winograd_f4", "fft")

# Every schedule `tracker tune` can run, as code: each shape and its neighbours in ring depth and
# warp layout; and one that only `--tile` can ask for (both at once). A register policy (/ctas1,
# /ctas2) changes what ptxas allocates, not the code: test_kernels holds its SASS.
SCHEDULES = (*dict.fromkeys(t for shape in SHAPES for t in (shape, *shape.neighbours()) if t.min_ctas == 0),
             Tile(64, 64, 8, stages=4, warp_rows=8))
RING = Tile(128, 128, 8, stages=3)  # a 3-deep ring: not a power of two
