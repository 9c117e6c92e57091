"""The analytic model of the convolution algorithms (paper 004): multiplies, transforms and
workspace per layer phase, the roofline and memory peak they move, and `tracker model
--algorithm`. The multiplies per (image, input channel, output channel) are counted by hand
from each algorithm's definition."""

from __future__ import annotations

import json

import pytest

from tracker.cli import cli
from tracker.errors import UnknownName
from tracker.model import lookup, memory, predict
from tracker.model.algorithms import ALGORITHMS, conv_cost
from tracker.model.roofline import compare
from tracker.nets import build
from tracker.nets.layers import Network, conv

ALEXNET = build("alexnet")


def per_pair(layer_name: str, algorithm: str, phase: str = "fwd") -> float:
    layer = ALEXNET.layer(layer_name)
    pairs = layer.input_shapes[0][0] * layer.output_shape[0]
    return conv_cost(layer, phase, 1, algorithm).multiplies / pairs


@pytest.mark.parametrize(
    "layer, algorithm, multiplies",
    [
        ("conv2", "direct", 27 * 27 * 5 * 5),  # 18,225
        ("conv2", "winograd_f2", 14 * 14 * 6 * 6),  # 196 tiles of 2x2, 6x6 products each: 7,056
        ("conv2", "winograd_f4", 7 * 7 * 8 * 8),  # 3,136
        ("conv2", "fft", 4 * 32 * 17),  # one 32x32 real FFT (31 padded), half spectrum: 2,176
        ("conv3", "direct", 13 * 13 * 3 * 3),  # 1,521
        ("conv3", "winograd_f2", 7 * 7 * 4 * 4),  # 784
        ("conv4", "winograd_f4", 4 * 4 * 6 * 6),  # 576
        ("conv5", "fft", 4 * 16 * 9),  # a 16x16 FFT (15 padded): 576
    ],
)
def test_multiplies_per_image_and_channel_pair(layer, algorithm, multiplies):
    assert per_pair(layer, algorithm) == multiplies
    assert per_pair(layer, algorithm, "bwd_data") == multiplies  # 13x13 and 27x27 in, as out
    assert per_pair(layer, algorithm, "bwd_weight") == multiplies  # tiles over dy, the same size


def test_winograd_and_fft_do_not_apply_at_stride_4_and_say_so():
    for algorithm in ("winograd_f2", "winograd_f4", "fft"):
        cost = conv_cost(ALEXNET.layer("conv1"), "fwd", 128, algorithm)
        assert cost.algorithm == "direct" and cost.note.startswith(f"{algorithm} needs stride 1 (conv1 has stride 4x4)")
        assert cost.multiplies == conv_cost(ALEXNET.layer("conv1"), "fwd", 128, "direct").multiplies


def test_workspace_and_transforms_by_hand():
    """conv3 (256 -> 384 channels, 13x13) in F(2x2,3x3) at batch 1: 49 tiles of 4x4."""
    cost = conv_cost(ALEXNET.layer("conv3"), "fwd", 1, "winograd_f2")
    assert cost.workspace == 16 * (49 * 256 + 256 * 384 + 49 * 384)
    assert cost.transform_flops == 49 * 256 * 4 * 4**3 + 256 * 384 * (2 * 4 * 9 + 2 * 16 * 3) + 49 * 384 * (
        2 * 2 * 16 + 2 * 4 * 4
    )
    fft = conv_cost(ALEXNET.layer("conv3"), "fwd", 1, "fft")
    assert fft.workspace == 2 * 16 * 9 * (256 + 256 * 384 + 384)


def test_fft_tiles_an_input_larger_than_32():
    net = Network("big", (4, 64, 64), options={})
    net.add("conv", conv(8, 3, pad=1))
    cost = conv_cost(net.layers[0], "fwd", 2, "fft")
    assert cost.multiplies == 4 * (2 * 3 * 3) * 4 * 8 * 32 * 17  # 30x30 outputs a 32x32 tile: 3x3 tiles
    assert "32x32 FFT tiles" in cost.note


def test_a_named_algorithm_moves_the_roofline_and_the_memory_peak():
    h100 = lookup("h100")
    plain = {(p.layer, p.phase): p for p in predict(ALEXNET, 128, h100)}
    direct = {(p.layer, p.phase): p for p in predict(ALEXNET, 128, h100, algorithm="direct")}
    fft = {(p.layer, p.phase): p for p in predict(ALEXNET, 128, h100, algorithm="fft")}
    for key, p in plain.items():  # direct costs what the default convention costs
        assert (direct[key].ops, direct[key].bytes) == (p.ops, p.bytes), key
    conv2 = fft[("conv2", "fwd")]
    cost = conv_cost(ALEXNET.layer("conv2"), "fwd", 128, "fft")
    assert (conv2.algorithm, conv2.macs, conv2.ops) == (
        "fft",
        cost.multiplies,
        2 * cost.multiplies + cost.transform_flops,
    )
    assert conv2.bytes == plain[("conv2", "fwd")].bytes + 2 * 4 * cost.workspace  # written and read once
    assert conv2.workspace_bytes == 4 * cost.workspace and conv2.predicted_ms < plain[("conv2", "fwd")].predicted_ms
    assert fft[("relu2", "fwd")] == plain[("relu2", "fwd")]  # only convolutions change
    assert fft[("conv1", "fwd")].algorithm == "direct"
    largest = max(
        conv_cost(layer, phase, 128, "fft").workspace
        for layer in ALEXNET.layers
        if layer.kind == "conv"
        for phase in layer.phases
    )
    assert memory(ALEXNET, 128, 32, "fft").workspace_bytes == 4 * largest
    assert memory(ALEXNET, 128, 32, "implicit_gemm").workspace_bytes == 0
    assert "workspace_bytes" not in plain[("conv2", "fwd")].to_dict()


def test_compare_marks_the_fastest_algorithm_of_each_conv_layer_phase():
    rows = compare(ALEXNET, 128, lookup("h100"), phases="fwd")
    conv2 = {r["algorithm"]: r for r in rows if r["layer"] == "conv2"}
    assert list(conv2) == list(ALGORITHMS)
    assert [name for name, r in conv2.items() if r["best"] != "no"] == ["fft"] and conv2["fft"]["best"] == "yes"
    # conv1 (stride 4): Winograd and FFT do not apply; the three GEMM forms predict one time: a tie, not a pick
    conv1 = {r["algorithm"]: r["best"] for r in rows if r["layer"] == "conv1"}
    assert conv1 == {"direct": "tie", "implicit_gemm": "tie", "gemm": "tie"}
    assert {r["algorithm"] for r in rows if r["layer"] == "conv1"} == {"direct", "implicit_gemm", "gemm"}
    without_device = compare(ALEXNET, 128, phases="fwd")
    assert all("predicted_ms" not in r for r in without_device)


def test_the_best_of_several_names_a_tie_where_they_are_equal_to_the_digits_shown():
    from tracker.stats import best_of, tie

    assert best_of([0.4031, 0.4034, 0.5]) == [0, 1]  # both read 0.403
    assert best_of([0.4031, 0.4036, 0.5]) == [0]  # 0.403 against 0.404
    assert best_of([3.0, 7.0, 7.0], lowest=False) == [1, 2] and best_of([]) == []
    assert tie(["fft"]) == "fft" and tie(["winograd_f2", "winograd_f4"]) == "winograd_f2 = winograd_f4 (tie)"
    assert tie(list("abcde")) == "a = b = c and 2 more (tie)"


def test_the_cli(runner, tmp_path):
    result = runner.invoke(cli, ["model", "alexnet", "--batch", "128", "--algorithm", "all", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert {r["layer"] for r in rows} == {"conv1", "conv2", "conv3", "conv4", "conv5"}
    result = runner.invoke(cli, ["model", "alexnet", "--algorithm", "winograd_f4", "--memory", "--format", "json"])
    assert result.exit_code == 0, result.output
    for args, message in (
        (["--algorithm", "winograd"], "unknown algorithm 'winograd'"),
        (["--algorithm", "all", "--memory"], "--algorithm all compares the algorithms"),
    ):
        result = runner.invoke(cli, ["model", "alexnet", *args])
        assert result.exit_code == 1 and message in result.output and len(result.output.strip().splitlines()) == 1


def test_an_unknown_algorithm_is_refused_where_it_enters():
    with pytest.raises(UnknownName, match="did you mean"):
        predict(ALEXNET, 1, algorithm="winograd_f3")
