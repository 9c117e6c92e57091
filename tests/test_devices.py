"""The device catalog: forgiving lookup, sources for every figure, the papers' figures."""

import pytest

from tracker.errors import UnknownName
from tracker.model.devices import CATALOG, SOURCES, lookup
from tracker.model.roofline import Roofs


@pytest.mark.parametrize(
    "name, key",
    [
        ("h100", "h100-sxm"),
        ("H100-SXM", "h100-sxm"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("nvidia h200", "h200"),
        ("GeForce GTX 1080", "gtx1080"),
        ("Tesla K40c", "k40"),
        ("Tesla K20c", "k20c"),
        ("k20", "k20c"),
        ("NVIDIA GeForce GTX TITAN X", "gtx-titan-x"),
        ("TITAN X (Pascal)", "titan-x-pascal"),
        ("rtx 2060 super", "rtx2060-super"),
        ("MX230", "mx230"),
        ("940mx", "940mx"),
        ("v100", "v100"),
        ("A100-SXM4-80GB", "a100"),
        ("l4", "l4"),
        ("RTX-4090", "rtx4090"),
    ],
)
def test_lookup_forgives(name, key):
    assert lookup(name).key == key


def test_unknown_and_ambiguous_names():
    with pytest.raises(UnknownName, match="unknown device 'h1000'"):
        lookup("h1000")
    with pytest.raises(UnknownName, match="ambiguous"):
        lookup("Titan X")


def test_every_figure_has_a_known_source():
    for device in CATALOG:
        given = {"compute_capability", "sm_count", "fp32_tflops", "dram_gbps", "l2_kib", "shared_kib_per_sm"}
        optional = {key for key in ("l2_bytes_per_clock", "memory_gb") if getattr(device, key)}
        assert set(device.sources) == given | optional
        assert set(device.sources.values()) <= set(SOURCES)


def test_the_memory_level_roofs_follow_from_the_clock_each_peak_implies():
    # Every device's FP32 peak over its lanes gives a boost clock its notes name (0.7-2.6 GHz), so the
    # FP32 lanes per SM of each compute capability are right; L1 is 128 B per clock per SM.
    for device in CATALOG:
        assert 0.7e9 < device.clock_hz < 2.6e9, device.key
    h100 = lookup("h100")
    assert h100.clock_hz == pytest.approx(1.98e9, rel=2e-3)  # "16896 cores at the 1980 MHz boost clock"
    assert h100.l1_bandwidth == pytest.approx(132 * 128 * 1.98e9, rel=2e-3)  # 33.5 TB/s
    assert lookup("a100").l2_bandwidth == pytest.approx(5120 * 1.41e9, rel=2e-3)  # the whitepaper's 5120 B/clk
    assert h100.l2_bandwidth is None  # no published figure: no L2 roof from the catalog
    roofs = Roofs.of(h100)
    assert list(roofs.bandwidth) == ["L1", "DRAM"] and roofs.ridge("DRAM") == pytest.approx(66.9e12 / 3.35e12)


def test_paper_000_table_1_ridge_points():
    # Paper 000 Table 1 prints each device's arithmetic intensity at the ridge: 13.98, 66.2, 16.
    assert lookup("mx230").ridge == pytest.approx(13.98, abs=0.01)
    assert lookup("940mx").ridge == pytest.approx(66.2, abs=0.05)
    assert lookup("rtx2060-super").ridge == pytest.approx(16.0, abs=0.05)


def test_fp32_peak_is_cores_times_two_times_clock():
    assert lookup("h100").fp32_tflops == pytest.approx(16896 * 2 * 1.98e9 / 1e12, rel=1e-3)
    assert lookup("gtx1080").fp32_tflops == pytest.approx(2560 * 2 * 1.733e9 / 1e12, rel=1e-3)
    assert lookup("k40").fp32_tflops == pytest.approx(2880 * 2 * 0.745e9 / 1e12, rel=1e-3)
    assert lookup("k20c").fp32_tflops == pytest.approx(2496 * 2 * 0.706e9 / 1e12, rel=2e-3)  # 3.52 rounds 3.524
