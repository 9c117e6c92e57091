"""The wave model, with no GPU: AlexNet's training step at batch 128 planned and launched on the
emulation without running (its launch geometry at full size), each GEMM-shaped launch's CTAs set
against the slots an H100 holds of its build (132 SMs x the CTAs an SM holds, read from the sm_90
build's registers and shared memory). Split-K sizes grids to whole waves (``gemm.Tile.splits``):
every GEMM-shaped layer phase keeps at least 90 % of the slots busy."""

from __future__ import annotations

import pytest

from tracker.gpu.compile import build_all, resident_blocks
from tracker.gpu.network import PlanRunner, plan
from tracker.nets import build
from tracker.ops import OPS
from tracker.ops.launch import wave_efficiency

pytestmark = pytest.mark.slow  # compiles kernels with NVRTC
GEMM_KERNELS = sorted(
    {
        (k.source, k.name)
        for v in OPS.launches()
        for k in v.kernels
        if k.name.startswith("gemm_") or k.name.endswith("_implicit")
    }
)


@pytest.fixture(scope="module")
def sm90():
    """The default tile's sm_90 builds of every module with a GEMM-shaped kernel."""
    builds = build_all((source, "sm_90", "ca", ()) for source in {s for s, _ in GEMM_KERNELS})
    return {source: b for (source, *_), b in builds.items()}


@pytest.mark.parametrize("source, name", GEMM_KERNELS, ids=[n for _, n in GEMM_KERNELS])
def test_every_default_gemm_build_holds_two_ctas_an_sm_without_spills(sm90, source, name):
    """At most 128 registers: two 256-thread CTAs share an SM (what the emulation's slots stand in for)."""
    emu = pytest.importorskip("emu.emulator")
    r = sm90[source].kernels[name]
    assert (r.spill_stores, r.spill_loads) == (0, 0), r
    assert r.registers <= 128 and emu.SMS * resident_blocks(r, "sm_90") == emu.SLOTS, r


@pytest.mark.parametrize("by_rule", [True, False], ids=["default plan", "untuned"])
def test_every_gemm_shaped_phase_keeps_90_percent_of_the_slots_busy(sm90, tmp_path, by_rule):
    emu = pytest.importorskip("emu.emulator")
    net = build("alexnet")
    geometry = emu.Emulator(tmp_path, execute=False)
    PlanRunner(geometry, net, 128, {}, steps=plan(net, {}, batch=128, by_rule=by_rule)).iteration()
    gemms = [r for r in geometry.log if (r.source, r.kernel) in GEMM_KERNELS]
    assert len({(r.context.layer.name, r.context.phase) for r in gemms}) == 23  # every GEMM-shaped layer phase
    for r in gemms:
        per_sm = resident_blocks(sm90[r.source].kernels[r.kernel], "sm_90")
        ctas = r.grid[0] * r.grid[1] * r.grid[2]
        busy = wave_efficiency(ctas, emu.SMS * per_sm)
        assert busy >= 0.9, (r.context.layer.name, r.context.phase, r.kernel, r.grid, f"{busy:.2f}")
