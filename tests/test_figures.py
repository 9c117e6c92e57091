"""The one plotting room (tracker/figures) and the one number formatter (tracker/units): labels
that never overlap at AlexNet's 49 or unet3d's 176 layer phases, one colour per phase in every
figure, no global matplotlib state touched, and outputs refused before any work."""

from __future__ import annotations

import itertools

import pytest
from matplotlib.text import Text

from tracker import units
from tracker.cli import cli
from tracker.figures import PHASE_COLORS, bars
from tracker.figures.roofline import model_points, roofline
from tracker.model import lookup, predict
from tracker.model.roofline import Roofs
from tracker.nets import build


@pytest.mark.parametrize(
    "column, value, text",
    [
        ("ms", 49.3, "49.3 ms"),
        ("b_ms", 0.885, "885 µs"),
        ("ms_per_image", 0.1164, "116 µs"),
        ("bytes", 1_023_000, "1.02 MB"),
        ("dram_read_bytes", 999_999, "1.00 MB"),
        ("l2_bytes_per_s", 2.04e12, "2.04 TB/s"),
        ("flops_per_s", 6.69e13, "66.9 TFLOP/s"),
        ("hit_rate_pct", 52.71, "52.7%"),
        ("speedup", 1.1649, "1.16x"),
        ("instructions", 885_123, "885k"),
        ("launches", 3, "3"),
        ("batch", 128, "128"),
        ("noise", True, "yes"),
        ("spread_pct", None, ""),
        ("speedup", float("nan"), ""),
        ("layer", "conv1", "conv1"),
        ("intensity", 15.9, "15.9 FLOP/B"),
        ("shared_bytes", 4, "4 B"),
        ("l2_kib", 51200, "50.0 MiB"),
        ("l2_kib", 1280, "1.25 MiB"),
        ("shared_kib_per_sm", 228, "228 KiB"),
        # a time below a nanosecond in ps, not '7.95e-10 s'; a name's multiple of a unit read as such
        ("a_ms", 7.95e-7, "795 ps"),
        ("a_ms", 0.000693, "693 ns"),
        ("duration_ns", 3150, "3.15 µs"),
        ("dram_gbps", 3350, "3.35 TB/s"),
        ("fp32_tflops", 0.784, "784 GFLOP/s"),
        ("attainable_gflops", 5025, "5.03 TFLOP/s"),
        ("workspace_mib", 12.5, "12.5 MiB"),
    ],
)
def test_one_formatter_gives_every_number_its_unit(column, value, text):
    assert units.cell(column, value) == text


@pytest.mark.parametrize(
    "column, text",
    [
        ("a_ms", "a (time)"),
        ("median_ms", "median (time)"),
        ("spread_pct_a", "spread a (%)"),
        ("dram_gbps", "dram (B/s)"),
        ("l2_kib", "l2 (bytes)"),
        ("shared_kib_per_sm", "shared per sm (bytes)"),
        ("attainable_gflops", "attainable (FLOP/s)"),
        ("ridge_flop_per_byte", "ridge (FLOP/B)"),
        ("layer", "layer"),
        ("ms", "time"),
    ],
)
def test_a_header_names_the_quantity_and_no_unit(column, text):
    """Cells carry their own unit, scaled to read (693 ns beside 3.15 µs), so the header under
    which they stand names the quantity, never a unit the cells would contradict."""
    assert units.header(column) == text


def test_a_column_of_counts_has_one_format():
    """attainable_gflops printed '5.86k' beside '5025': now three significant figures throughout."""
    assert [units.count(v) for v in (419, 5025, 5860, 66_900.0, 41.1)] == ["419", "5.03k", "5.86k", "66.9k", "41.1"]


def _label_boxes(fig):
    ax = fig.axes[0]
    fig.canvas.draw()  # an annotation's text is positioned at draw time
    renderer = fig.canvas.get_renderer()
    # Text's own extent: an Annotation's would include its leader line
    return [
        Text.get_window_extent(t, renderer)
        for t in ax.texts
        if t.get_text() and not t.get_text().startswith(("FP32", "L1 ", "L2 ", "DRAM "))
    ]


@pytest.mark.parametrize("net, batch, spots", [("alexnet", 128, 17), ("unet3d", 4, 26)])
def test_the_roofline_labels_every_spot_and_no_two_labels_overlap(net, batch, spots):
    rows = predict(build(net), batch, lookup("h100"))
    fig = roofline(model_points(rows), Roofs.of(lookup("h100")), net, basis="predicted")
    assert fig.unplaced == []
    boxes = _label_boxes(fig)
    assert len(boxes) >= spots  # coinciding points share a label ('relu1 ... relu7 (7) F')
    overlapping = [(a, b) for a, b in itertools.combinations(boxes, 2) if a.overlaps(b)]
    assert overlapping == []
    frame = fig.axes[0].get_window_extent(fig.canvas.get_renderer())
    assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1 for b in boxes)


def test_the_model_roofline_draws_every_roof_and_ridge_of_the_device():
    rows = predict(build("alexnet"), 16, lookup("a100"))
    fig = roofline(model_points(rows), Roofs.of(lookup("a100")), "a100", basis="predicted")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "FP32 19.5 TFLOP/s (catalog)" in texts and "DRAM 2.04 TB/s (catalog)" in texts
    assert "L2 7.22 TB/s (catalog)" in texts and "L1 19.5 TB/s (catalog)" in texts
    assert {"ridge 9.56 FLOP/B", "ridge 2.70 FLOP/B", "ridge 1.00 FLOP/B"} <= set(texts)


@pytest.mark.parametrize(
    "store, roofs, ridges",
    [
        (
            "k20c",
            {"FP32 3.52 TFLOP/s (catalog)", "DRAM 208 GB/s (catalog)", "L1 1.17 TB/s (catalog)"},
            {"ridge 16.9 FLOP/B", "ridge 3.00 FLOP/B"},
        ),
        (
            "v100",
            {
                "FP32 15.7 TFLOP/s (catalog)",
                "DRAM 900 GB/s (catalog)",
                "L2 3.14 TB/s (catalog)",
                "L1 15.7 TB/s (catalog)",
            },
            {"ridge 17.4 FLOP/B", "ridge 5.00 FLOP/B", "ridge 1.00 FLOP/B"},
        ),
    ],
)
def test_the_sample_stores_rooflines_draw_their_devices_roofs(store, roofs, ridges, tmp_path):
    """The public K20c (timed) and V100 (untimed, so predicted) samples, as the report draws them."""
    from samples import sample_store, v100_sample_store

    from tracker.analysis import roofline as analysis
    from tracker.store import open_store

    db = str(tmp_path / "trace.db")
    run_id = {"k20c": sample_store, "v100": v100_sample_store}[store](db)
    trace = open_store(db, write=False)
    points, basis = analysis.chart(trace, run_id)
    assert basis == {"k20c": "time", "v100": "predicted"}[store]
    fig = roofline(points, analysis.roofs(trace, run_id), store, basis)
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert roofs <= texts and ridges <= texts and fig.unplaced == []
    boxes = _label_boxes(fig)
    assert [(a, b) for a, b in itertools.combinations(boxes, 2) if a.overlaps(b)] == []


def test_every_phase_has_one_colour_in_every_figure():
    import pandas as pd
    from matplotlib.colors import to_hex

    frame = pd.DataFrame(
        {
            "layer": ["conv1", "conv1", "conv1"],
            "phase": ["fwd", "bwd_data", "bwd_weight"],
            "ms": [1.0, 2.0, 3.0],
            "speedup": [1.1, 0.9, 1.0],
            "change_pct": [10.0, -10.0, 0.0],
            "noise": [False, False, True],
        }
    )
    for fig in (bars.by_phase(frame, "ms", "t", "s", "time", log=True), bars.speedup(frame, "t", "s")):
        ax = fig.axes[0]
        assert [to_hex(p.get_facecolor()) for p in ax.patches] == [PHASE_COLORS[p].lower() for p in frame.phase]
        assert [to_hex(t.get_color()) for t in ax.get_yticklabels()] == [PHASE_COLORS[p].lower() for p in frame.phase]


def test_drawing_leaves_the_callers_matplotlib_alone():
    import matplotlib

    before = (matplotlib.get_backend(), dict(matplotlib.rcParams))
    rows = predict(build("alexnet"), 1, lookup("h100"))
    roofline(model_points(rows), Roofs.of(lookup("h100")), "x", basis="predicted")
    assert (matplotlib.get_backend(), dict(matplotlib.rcParams)) == before


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["model", "alexnet", "--device", "h100", "--plot", "/nonexistent/dir/r.png"],
            "cannot write /nonexistent/dir/r.png: directory /nonexistent/dir does not exist",
        ),
        (
            ["model", "alexnet", "--device", "h100", "--plot", "r.txt"],
            "cannot write r.txt: name a .png, .svg, .pdf file",
        ),
        (
            ["report", "last", "--out", "/proc/version/report"],
            "cannot write to /proc/version/report: /proc/version is a file",
        ),
        (
            ["export", "last", "--out", "/proc/sys/report"],
            "cannot write to /proc/sys/report: /proc/sys is not writable",
        ),
    ],
)
def test_outputs_that_cannot_be_written_fail_in_one_line_before_any_work(runner, tmp_path, args, message):
    db = tmp_path / "never.db"
    result = runner.invoke(cli, [*args, *(["--db", str(db)] if args[0] != "model" else [])])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and message in result.output, result.output
    assert result.output.startswith("Error:") and not db.exists()  # refused before the store was opened


def test_a_speedup_figure_signs_its_slowdowns():
    """Most bars of an L1-bypass or fusion figure are slowdowns: their ticks read -40%, -20%, not 0 0 0."""
    import pandas as pd

    frame = pd.DataFrame(
        {
            "layer": ["conv1", "conv2", "conv3"],
            "phase": ["fwd", "bwd_data", "bwd_weight"],
            "speedup": [0.55, 0.8, 1.1],
            "change_pct": [-45.0, -20.0, 10.0],
            "noise": [False, False, True],
        }
    )
    fig = bars.speedup(frame, "l1-bypass", "a test")
    fig.canvas.draw()
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert {"-40%", "-20%", "0", "10%"} <= set(ticks), ticks
    assert units.axis_tick("change_pct", -40) == "-40%" and units.axis_tick("ms", -0.002) == "-2 µs"
