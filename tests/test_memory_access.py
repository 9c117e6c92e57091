"""The kernels' memory access, counted by address arithmetic with no GPU: the emulation records
every lane's address of every load and store (tests/emu/trace.py), and the warp-wide accesses they
make are counted in 32-byte sectors (global memory) and bank wavefronts (shared memory), as a GPU
serves them. What the counts prove: every GEMM ring's shared loads and stores take the one
wavefront a phase they must (no bank conflict), at every tile `tracker tune` can pick; the
memory-bound kernels use most of each sector they touch (the target: 75 %)."""

from __future__ import annotations

import numpy as np
import pytest
from emu.trace import RECORD, sectors, wavefronts

from tracker.model.algorithms import FFT_TILE
from tracker.ops import Case
from tracker.ops.fft import TILES, shared_bytes
from tracker.ops.gemm import DEFAULT, SHAPES, Tile
from tracker.ops.launch import LaunchRecord
from tracker.ops.selftest import run_case

SECTOR_USE = 0.75  # of each touched sector's bytes


def _records(addresses, bytes_=4, lanes=None) -> np.ndarray:
    """One warp-wide access by lanes 0.. of block 0 at ``addresses``."""
    lanes = range(len(addresses)) if lanes is None else lanes
    r = np.zeros(len(addresses), RECORD)
    r["address"], r["thread"], r["bytes"], r["instruction"] = addresses, list(lanes), bytes_, 7
    return r


def test_the_counts_follow_the_gpus_rules():
    base = 1 << 20
    coalesced = sectors(_records([base + 4 * i for i in range(32)]))
    assert (coalesced.requests, coalesced.sectors, coalesced.use) == (1, 4, 1.0)
    strided = sectors(_records([base + 32 * i for i in range(32)]))  # a float per sector
    assert (strided.sectors, strided.use) == (32, 0.125)
    same = sectors(_records([base] * 32))  # every lane one float: one sector, 4 of its bytes wanted
    assert (same.sectors, same.wanted) == (1, 4)
    wide = sectors(_records([base + 16 * i for i in range(32)], 16))
    assert (wide.sectors, wide.use) == (16, 1.0)

    assert wavefronts(_records([base + 4 * i for i in range(32)])).conflicts == 0
    column = wavefronts(_records([base + 128 * i for i in range(32)]))  # one bank, 32 words
    assert (column.wavefronts, column.conflicts) == (32, 31)
    assert wavefronts(_records([base] * 32)).conflicts == 0  # a broadcast
    two_way = wavefronts(_records([base + 4 * (2 * i) for i in range(32)]))  # stride 2: banks hold 2 words
    assert two_way.conflicts == 1
    vector = wavefronts(_records([base + 16 * i for i in range(32)], 16))  # quarter warps: 4 phases
    assert (vector.wavefronts, vector.ideal) == (4, 4)
    rows = wavefronts(_records([base + 16 * 32 * i for i in range(32)], 16))  # a float4 a row of 32: banks 0-3
    assert (rows.wavefronts, rows.conflicts) == (32, 28)  # each quarter warp's 8 lanes in turn
    padded = wavefronts(_records([base + 16 * 33 * i for i in range(32)], 16))  # rows of 33: banks 4 apart
    assert padded.conflicts == 0
    # two executions of one instruction by the same lanes are two accesses, not one of 64 lanes
    twice = np.concatenate([_records([base + 4 * i for i in range(32)])] * 2)
    assert sectors(twice).requests == 2


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    emu = pytest.importorskip("emu.emulator")
    if not emu.available():
        pytest.skip("needs g++ for the CUDA emulation")
    return emu.Emulator(tmp_path_factory.mktemp("traced"), trace=True)


def _run(traced, case: Case, variant: str, tile: Tile | None = None, kernels: set[str] | None = None) -> dict:
    """The traces of one case's launches by kernel name, each name's launches in order (``kernels``:
    of those alone), after checking the results against the reference."""
    traced.traces.clear()
    traced.traced_kernels = kernels
    assert all(r.passed for r in run_case(traced, case, variant, tile=tile))
    found: dict[str, list] = {}
    for trace in traced.traces:
        found.setdefault(trace.kernel, []).append(trace)
    return found


GEMM_CASES = (  # every GEMM-shaped kernel: dense (linear), implicit conv, fused (the mask ring), batched
    (Case("linear", "fc", {"x": (48, 96), "w": (80, 96)}, {}), "shared"),
    (Case("linear", "fc-fused", {"x": (48, 96), "w": (80, 96)}, {}), "fused"),
    (Case("conv", "conv", {"x": (2, 4, 9, 9), "w": (24, 4, 3, 3)}, {"stride": 1, "pad": 1}), "shared"),
    (Case("conv", "conv-fused", {"x": (2, 4, 9, 9), "w": (24, 4, 3, 3)}, {"stride": 1, "pad": 1}), "fused"),
    # 8 x 8: the batched GEMMs' rows hold 8 tiles, 16-byte aligned as AlexNet's are at batch 128 (a
    # row length not a multiple of 4 falls back to 4-byte copies, 4 lanes a bank: fetch_runs)
    (Case("conv", "conv-winograd", {"x": (2, 4, 8, 8), "w": (24, 4, 3, 3)}, {"stride": 1, "pad": 1}), "winograd_f4"),
)


def _gemm_kernels(traces: dict) -> dict:
    """The GEMM-shaped kernels' traces (common.cuh's gemm_tile): their rings are what is counted."""
    return {name: t for name, t in traces.items() if name.startswith("gemm_") or name.endswith("_implicit")}


@pytest.mark.parametrize("case, variant", GEMM_CASES, ids=lambda v: getattr(v, "layer", v))
def test_every_gemm_ring_is_free_of_bank_conflicts(traced, case, variant):
    rings = _gemm_kernels(_run(traced, case, variant))
    assert len(rings) >= 2  # forward and backward GEMMs at least
    for name, traces in rings.items():
        for trace in traces:
            counted = wavefronts(trace.of("shared"))
            assert counted.conflicts == 0, f"{name}: {counted}"


def _tiles() -> list[Tile]:
    """Every tile shape tune races and each one's neighbours (pipeline depth, warp layout)."""
    found = dict.fromkeys([*SHAPES, *(n for s in SHAPES for n in s.neighbours() if n.min_ctas == 0)])
    return [t for t in found if t != DEFAULT]


@pytest.mark.parametrize("tile", _tiles(), ids=lambda t: t.label)
def test_every_tile_tune_can_pick_keeps_the_ring_free_of_bank_conflicts(traced, tile):
    case = Case("linear", "fc", {"x": (2 * tile.m, 2 * tile.k * 4), "w": (2 * tile.n, 2 * tile.k * 4)}, {})
    rings = _gemm_kernels(_run(traced, case, "shared", tile))
    assert {"gemm_nt", "gemm_nn", "gemm_tn"} <= set(rings)
    for name, traces in rings.items():
        for trace in traces:
            counted = wavefronts(trace.of("shared"))
            assert counted.conflicts == 0, f"{tile.label} {name}: {counted}"


def _sector_use(traces: list) -> float:
    """The share of the touched sectors' bytes a kernel's global loads and stores want, over all its
    launches together (a reduction's one result a block is a sector of its own, and nothing beside it)."""
    counted = [sectors(t.of("global", store=store)) for t in traces for store in (False, True)]
    return sum(c.wanted for c in counted) / (32 * sum(c.sectors for c in counted))


CONV2 = Case("conv", "conv2-like", {"x": (1, 4, 27, 27), "w": (8, 4, 5, 5)}, {"stride": 1, "pad": 2})
CONV3 = Case("conv", "conv3-like", {"x": (1, 8, 13, 13), "w": (8, 8, 3, 3)}, {"stride": 1, "pad": 1})
POOL1 = Case("maxpool", "pool1-like", {"x": (1, 4, 55, 55)}, {"size": 3, "stride": 2})
LRN = Case("lrn", "lrn1-like", {"x": (1, 8, 55, 55)}, {"size": 5, "alpha": 1e-4, "beta": 0.75, "k": 2.0})
# The FFT's transforms store a frequency of consecutive tiles (columns of its planes): cases with a
# plane of several tiles, a batch (conv2 and conv3 run one tile an image), and 8 channels both ways
# so that the filter transform's blocks of (output, channel) pairs hold 8 consecutive channels
FFT32 = Case("conv", "conv2-batch16", {"x": (16, 8, 27, 27), "w": (8, 8, 5, 5)}, {"stride": 1, "pad": 2})
FFT16 = Case("conv", "conv3-batch32", {"x": (32, 8, 13, 13), "w": (8, 8, 3, 3)}, {"stride": 1, "pad": 1})


class Wasteful(AssertionError):
    """A kernel that uses less of each sector than SECTOR_USE: what a row given a reason (a known
    shortfall, a strict xfail) may fail with, and nothing else (a case that cannot run is none)."""


MEMORY_BOUND = [
    (POOL1, "shared", "maxpool_fwd_shared", None),
    (POOL1, "shared", "maxpool_bwd_shared", None),
    (LRN, "shared", "lrn_fwd_window", None),
    (LRN, "shared", "lrn_bwd_window", None),
    (CONV2, "shared", "bias_grad", None),
    (CONV2, "winograd", "winograd_input_a6", None),
    (CONV2, "winograd", "winograd_output_a6", None),
    (CONV3, "winograd", "winograd_input_a4", None),
    (CONV3, "winograd", "winograd_output_a4", None),
    (CONV3, "winograd_f4", "winograd_input_a6", None),
    (CONV3, "winograd_f4", "winograd_output_a6", None),
    (CONV2, "winograd_f4", "winograd_input_a8", None),
    (CONV2, "winograd_f4", "winograd_output_a8", None),
    (FFT32, "fft", "fft_filter_n32", None),
    (FFT32, "fft", "fft_input_n32", None),
    (FFT32, "fft", "fft_output_n32", None),
    (FFT16, "fft", "fft_filter_n16", None),
    (FFT16, "fft", "fft_input_n16", None),
    (FFT16, "fft", "fft_output_n16", None),
]


@pytest.mark.parametrize(
    "case, variant, kernel",
    [
        pytest.param(
            c,
            v,
            k,
            marks=[pytest.mark.xfail(strict=True, raises=Wasteful, reason=why)] if why else [],
            id=f"{c.layer}-{k}",
        )
        for c, v, k, why in MEMORY_BOUND
    ],
)
def test_memory_bound_kernels_use_most_of_each_sector(traced, case, variant, kernel):
    traces = _run(traced, case, variant, kernels={kernel})
    assert kernel in traces, sorted(traces)
    use = _sector_use(traces[kernel])
    if use < SECTOR_USE:
        raise Wasteful(f"{kernel}: {use:.2f} of each sector's bytes")


WINOGRAD_TRANSFORMS = {f"winograd_{part}_a{side}" for part in ("input", "output") for side in (4, 6, 8)}


def _shared_spans(traced, case: Case, variant: str, kernels: set[str]) -> list[tuple[LaunchRecord, int]]:
    """Each launch of ``kernels``, every phase's, with the bytes its shared accesses span."""
    traced.log.clear()
    _run(traced, case, variant, kernels=kernels)
    launches = [k for k in traced.log if k.kernel in kernels]
    assert [k.kernel for k in launches] == [t.kernel for t in traced.traces]
    spans = []
    for launch, trace in zip(launches, traced.traces):
        shared = trace.of("shared")
        span = int(shared["address"].max() + shared["bytes"][shared["address"].argmax()] - shared["address"].min())
        spans.append((launch, span))
    return spans


@pytest.mark.parametrize("case, variant", [(CONV2, "winograd"), (CONV3, "winograd_f4")], ids=["conv2", "conv3"])
def test_the_winograd_transforms_stay_inside_the_shared_memory_they_ask_for(traced, case, variant):
    """The emulation gives every block all its dynamic shared memory, a GPU what the launch asks:
    each transform's shared accesses, every phase's, lie within the launch's shared_bytes."""
    spans = _shared_spans(traced, case, variant, WINOGRAD_TRANSFORMS)
    assert len(spans) == 7
    for launch, span in spans:
        assert 0 < span <= launch.shared_bytes, (launch.kernel, span, launch.shared_bytes)


@pytest.mark.parametrize("case, n", [(CONV3, 16), (CONV2, FFT_TILE)], ids=["conv3", "conv2"])
def test_the_fft_transforms_ask_for_the_shared_memory_they_use(traced, case, n):
    """tracker/ops/fft.py's shared_bytes against kernels/fft.cu's layout: every phase's transforms
    touch all of it (the windows and tiles of a block of 32 or more tiles, one tile an image here,
    the rest zeros) but the last tile's padding float, and nothing past it."""
    spans = _shared_spans(traced, case, "fft", {f"fft_{part}_n{n}" for part in ("filter", "input", "output")})
    assert len(spans) == 9 and TILES[n] >= 32
    for launch, span in spans:
        assert launch.shared_bytes == shared_bytes(n) and span == shared_bytes(n) - 4, (launch.kernel, span)


def test_every_fft_transform_launch_uses_most_of_each_sector(traced):
    """Each launch on its own, every layout a frequency's plane has: the forward's and the data
    gradient's [Re; Im], the weight gradient's [Re | Im] (the input) and [[Re, Im], [-Im, Re]] (dy's
    tiles), and the inverse that writes dw a (channel, output) pair a tile."""
    traces = _run(traced, FFT32, "fft", kernels={"fft_input_n32", "fft_output_n32"})
    uses = {name: [round(_sector_use([t]), 2) for t in launches] for name, launches in traces.items()}
    assert [len(uses["fft_input_n32"]), len(uses["fft_output_n32"])] == [4, 3], uses
    assert min(min(u) for u in uses.values()) >= SECTOR_USE, uses
