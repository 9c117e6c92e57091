"""Shape inference, layer IDs and options of the three networks."""

import pytest

from tracker.errors import TrackerError
from tracker.nets import build

ALEXNET_SHAPES = {
    "conv1": (96, 55, 55),
    "relu1": (96, 55, 55),
    "lrn1": (96, 55, 55),
    "pool1": (96, 27, 27),
    "conv2": (256, 27, 27),
    "lrn2": (256, 27, 27),
    "pool2": (256, 13, 13),
    "conv3": (384, 13, 13),
    "conv4": (384, 13, 13),
    "conv5": (256, 13, 13),
    "pool5": (256, 6, 6),
    "fc6": (4096,),
    "fc7": (4096,),
    "fc8": (1000,),
    "softmax": (1000,),
}


def test_alexnet_layers_in_paper_order_with_stable_ids():
    net = build("alexnet")
    names = [layer.name for layer in net.layers]
    assert names == [
        "conv1",
        "relu1",
        "lrn1",
        "pool1",
        "conv2",
        "relu2",
        "lrn2",
        "pool2",
        "conv3",
        "relu3",
        "conv4",
        "relu4",
        "conv5",
        "relu5",
        "pool5",
        "fc6",
        "relu6",
        "fc7",
        "relu7",
        "fc8",
        "softmax",
    ]
    assert [layer.id for layer in net.layers] == list(range(1, 22))
    assert [layer.id for layer in build("alexnet").layers] == [layer.id for layer in net.layers]


def test_alexnet_shapes_and_params():
    net = build("alexnet")
    for name, shape in ALEXNET_SHAPES.items():
        assert net.layer(name).output_shape == shape, name
    assert net.layer("conv1").params == 96 * 3 * 11 * 11 + 96
    assert net.layer("conv2").params == 256 * 96 * 5 * 5 + 256  # ungrouped: one tower
    assert net.layer("fc6").params == 256 * 6 * 6 * 4096 + 4096
    assert net.params == 62_378_344
    assert net.grouped_convolutions is False


def test_first_layer_has_no_bwd_data_and_weighted_layers_have_bwd_weight():
    net = build("alexnet")
    assert net.layer("conv1").phases == ("fwd", "bwd_weight")
    assert net.layer("conv2").phases == ("fwd", "bwd_data", "bwd_weight")
    assert net.layer("relu1").phases == ("fwd", "bwd_data")


def test_unet2d_default_is_a_u():
    net = build("unet2d")
    assert net.input_shape == (3, 128, 128)
    assert net.layer("enc1_relu2").output_shape == (32, 128, 128)
    assert net.layer("pool4").output_shape == (256, 8, 8)
    assert net.layer("mid_relu2").output_shape == (512, 8, 8)
    assert net.layer("up4").output_shape == (512, 16, 16)
    assert net.layer("concat4").output_shape == (768, 16, 16)
    assert net.layer("concat4").inputs == ("up4", "enc4_relu2")
    assert net.layer("dec1_relu2").output_shape == (32, 128, 128)
    assert net.layers[-2].name == "out_conv" and net.layers[-2].output_shape == (4, 128, 128)
    assert net.layers[-1].kind == "sigmoid"


def test_unet2d_conv_types_and_lightweight_stride():
    separable = build("unet2d", conv_type="separable")
    dw = separable.layer("enc2_conv1_dw")
    assert dw.op.groups == 32 and dw.params == 32 * 9 + 32
    assert separable.layer("enc2_conv1_pw").output_shape == (64, 64, 64)
    assert build("unet2d", conv_type="pointwise").layer("enc1_conv1").op.kernel == (1, 1)

    light = build("unet2d", second_stride=2)
    assert light.layer("enc1_conv2").output_shape == (32, 64, 64)
    assert light.layer("concat1").inputs == ("up1", "enc1_relu1")  # skip from before the strided conv
    assert not any(layer.kind == "maxpool" for layer in light.layers)
    assert light.layers[-1].output_shape == (4, 128, 128)


def test_unet2d_options():
    net = build("unet2d", input_size="192", base_filters=16, depth=3, classes=2, in_channels=1)
    assert net.input_shape == (1, 192, 192)
    assert net.layer("mid_relu2").output_shape == (128, 24, 24)
    assert net.layers[-1].output_shape == (2, 192, 192)


def test_unet3d_shapes():
    net = build("unet3d", input_size="64x64x32", depth=3)
    assert net.input_shape == (1, 64, 64, 32)
    assert net.layer("enc1_conv1").op.kernel == (3, 3, 3)
    assert net.layer("enc1_bn1").params == 2 * 32
    assert net.layer("mid_relu2").output_shape == (256, 8, 8, 4)
    assert net.layer("up3").kind == "convtranspose" and net.layer("up3").output_shape == (128, 16, 16, 8)
    assert net.layer("concat1").output_shape == (64, 64, 64, 32)
    assert net.layers[-1].output_shape == (3, 64, 64, 32)


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("alexnt", {}, "did you mean alexnet"),
        ("alexnet", {"depth": 3}, "alexnet does not take --depth"),
        ("unet2d", {"input_size": "100"}, "not divisible by 2.depth = 16"),
        ("unet2d", {"input_size": "12x"}, "is not N or NxN"),
        ("unet3d", {"input_size": "64x64"}, "needs 3 positive sizes"),
        ("unet3d", {"conv_type": "separable"}, "unet3d does not take --conv-type"),
        ("unet2d", {"depth": 9}, "out of range"),
    ],
)
def test_bad_network_options(name, options, message):
    with pytest.raises(TrackerError, match=message):
        build(name, **options)
