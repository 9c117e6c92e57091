"""The analytic model against paper 003's Table 1 and hand-computed values."""

import math

import pytest

from tracker.errors import TrackerError
from tracker.model import costs, lookup, memory, predict
from tracker.nets import build

# Paper 003, Table 1: operations per layer of AlexNet for one image, as printed.
TABLE_1 = {
    "conv1": 210e6,
    "relu1": 290e3,
    "lrn1": 4e6,
    "pool1": 630e3,
    "conv2": 896e6,
    "relu2": 186e3,
    "lrn2": 3e6,
    "pool2": 389e3,
    "conv3": 299e6,
    "relu3": 65e3,
    "conv4": 448e6,
    "relu4": 65e3,
    "conv5": 299e6,
    "relu5": 43e3,
    "pool5": 83e3,
    "fc6": 75e6,
    "relu6": 4e3,
    "fc7": 33e6,
    "relu7": 4e3,
    "fc8": 8e6,
}


def _unit(printed: float) -> float:
    """The last printed digit's place value: 1M for '896M', 1K for '65K'."""
    return 1e6 if printed >= 1e6 else 1e3


def fwd(net, batch=1, **kw):
    return {r.layer: r for r in predict(net, batch, phases="fwd", **kw)}


def test_forward_ops_reproduce_paper_003_table_1():
    rows = fwd(build("alexnet"))
    for layer, printed in TABLE_1.items():
        # The paper rounds some figures and truncates others (relu2: 186,624 -> '186K'),
        # so "to its printed precision" means within one unit of the last printed digit.
        assert abs(rows[layer].ops - printed) < _unit(printed), (layer, rows[layer].ops, printed)


def test_exact_forward_ops():
    rows = fwd(build("alexnet"))
    assert rows["conv1"].ops == 2 * 96 * 55 * 55 * 3 * 11 * 11 == 210_830_400
    assert rows["conv1"].macs == rows["conv1"].ops // 2
    assert rows["conv2"].ops == 2 * 256 * 27 * 27 * 96 * 25
    assert rows["fc6"].ops == 2 * 9216 * 4096
    assert rows["relu1"].ops == 96 * 55 * 55
    assert rows["pool1"].ops == 96 * 27 * 27 * 9
    assert rows["lrn1"].ops == (2 * 5 + 4) * 96 * 55 * 55  # our documented count
    # Table 1's softmax '1M' does not follow from its 1000 elements; we count 5 per element.
    assert rows["softmax"].ops == 5 * 1000


def test_backward_ops_and_phases():
    net = build("alexnet")
    c = costs(net.layer("conv2"), batch=2)
    assert c["fwd"].macs == c["bwd_data"].macs == c["bwd_weight"].macs == 2 * 256 * 27 * 27 * 96 * 25
    assert "bwd_data" not in costs(net.layer("conv1"), 1)
    assert costs(net.layer("pool1"), 1)["bwd_data"].ops == 96 * 27 * 27 * 10
    assert costs(net.layer("softmax"), 1)["bwd_data"].ops == 2 * 1000


def test_compulsory_bytes_by_hand():
    rows = {(r.layer, r.phase): r for r in predict(build("alexnet"), 1)}
    # conv1 fwd reads the image and the weights+biases, writes the output, 4 bytes each.
    assert rows["conv1", "fwd"].bytes == (3 * 227 * 227 + 34_944 + 96 * 55 * 55) * 4 == 1_919_724
    assert rows["relu1", "fwd"].bytes == 2 * 96 * 55 * 55 * 4
    # pool1 fwd writes its output and each window's maximum's int32 offset; its bwd_data reads
    # the output gradient and those offsets (not the input), writes the input gradient.
    pool1_in, pool1_out = 96 * 55 * 55, 96 * 27 * 27
    assert rows["pool1", "fwd"].bytes == (pool1_in + 2 * pool1_out) * 4
    assert rows["pool1", "bwd_data"].bytes == (2 * pool1_out + pool1_in) * 4
    # conv2 bwd_data reads the output gradient and the weights, writes the input gradient.
    assert rows["conv2", "bwd_data"].bytes == (256 * 27 * 27 + 256 * 96 * 25 + 96 * 27 * 27) * 4
    assert rows["conv2", "fwd"].intensity == pytest.approx(rows["conv2", "fwd"].ops / rows["conv2", "fwd"].bytes)


@pytest.mark.parametrize("bits", [8, 16, 32, 64])
def test_bytes_scale_with_dtype_bits(bits):
    row = fwd(build("alexnet"), dtype_bits=bits)["conv1"]
    assert row.bytes == 479_931 * bits // 8
    assert row.ops == 210_830_400


def test_roofline_on_h100():
    h100 = lookup("h100")
    rows = fwd(build("alexnet"), 128, device=h100)
    relu = rows["relu1"]
    assert relu.bound == "memory"
    assert relu.attainable_gflops == pytest.approx(0.125 * 3350)
    assert relu.predicted_ms == pytest.approx(relu.bytes / 3350e9 * 1e3)
    conv = rows["conv2"]
    assert conv.bound == "compute"
    assert conv.attainable_gflops == pytest.approx(66_900)
    assert conv.predicted_ms == pytest.approx(conv.ops / 66.9e12 * 1e3)


def test_alexnet_iteration_compute_floor_is_about_13_ms_on_h100():
    """The README's FP32 compute floor: one fwd+bwd of AlexNet at batch 128 at the H100 SXM peak
    takes 12.7 ms."""
    ops = sum(r.ops for r in predict(build("alexnet"), 128))
    assert ops / 66.9e12 * 1e3 == pytest.approx(12.67, abs=0.01)


def test_memory_by_hand():
    m = memory(build("alexnet"), batch=1)
    assert m.param_bytes == m.weight_grad_bytes == 62_378_344 * 4
    assert m.activation_bytes == 2_072_619 * 4  # the input and all 21 outputs of one image
    assert m.activation_grad_bytes == 2 * 96 * 55 * 55 * 4  # relu1: output and input gradient
    assert m.workspace_bytes == 27 * 27 * 96 * 25 * 4  # conv2's im2col of one image
    assert m.pool_index_bytes == (96 * 27 * 27 + 256 * 13 * 13 + 256 * 6 * 6) * 4  # pool1, 2, 5: an int32 an output
    assert m.peak_bytes == (
        2 * m.param_bytes + m.activation_bytes + m.pool_index_bytes + m.activation_grad_bytes + m.workspace_bytes
    )
    m128 = memory(build("alexnet"), batch=128)
    assert m128.activation_bytes == 128 * m.activation_bytes and m128.param_bytes == m.param_bytes
    assert m128.pool_index_bytes == 128 * m.pool_index_bytes
    # 256 MiB of im2col holds 38 of conv2's images: the batch runs in 4 chunks of 32
    assert m128.workspace_bytes == 32 * 27 * 27 * 96 * 25 * 4


def test_a_3d_convolution_has_no_im2col_workspace():
    """Our GEMM convolution's im2col runs 2-D convolutions only: the 3-D U-Net's predicted peak
    holds no workspace (it held 14.5 GB at batch 1 and 128^3, 21.2 GB in all, against 11.5 GB
    measured on an H200), the 2-D U-Net's still does."""
    unet3d = memory(build("unet3d"), batch=1)
    assert unet3d.workspace_bytes == 0
    assert unet3d.peak_bytes == (
        2 * unet3d.param_bytes + unet3d.activation_bytes + unet3d.pool_index_bytes + unet3d.activation_grad_bytes
    )
    assert 6.5e9 < unet3d.peak_bytes < 7e9
    assert memory(build("unet2d"), batch=16).workspace_bytes > 0


def test_phase_selection():
    net = build("alexnet")
    assert {r.phase for r in predict(net, 1, phases="bwd")} == {"bwd_data", "bwd_weight"}
    assert len(predict(net, 1)) == 49  # 21 fwd + 20 bwd_data + 8 bwd_weight


def test_unet_layers_without_arithmetic_still_have_traffic():
    rows = {(r.layer, r.phase): r for r in predict(build("unet2d"), 1)}
    concat = rows["concat4", "fwd"]
    assert concat.ops == 0 and concat.bytes == (512 * 16 * 16 + 256 * 16 * 16 + 768 * 16 * 16) * 4
    assert rows["up4", "bwd_data"].ops == 512 * 8 * 8 * 3


@pytest.mark.parametrize("bad", [dict(batch=0), dict(batch=10**7), dict(batch=1, dtype_bits=12)])
def test_bad_model_input(bad):
    with pytest.raises(TrackerError):
        predict(build("alexnet"), **bad)


def test_every_layer_kind_has_a_convention():
    from tracker.model import CONVENTIONS

    for name in ("alexnet", "unet2d", "unet3d"):
        for row in predict(build(name, **({"input_size": "32"} if name == "unet3d" else {})), 1):
            assert row.convention == CONVENTIONS[row.kind]
            assert row.bytes > 0 and math.isfinite(row.intensity)
