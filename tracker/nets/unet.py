"""U-Nets: the 2-D U-Net of paper 000 and the 3-D U-Net of papers 001/002.

Both share one skeleton: ``depth`` encoder levels (a block, then down-sampling), a bottleneck
block, and ``depth`` decoder levels (up-sampling, concatenation with the encoder level's skip,
a block). Filters start at ``base_filters`` and double per level.
"""

from __future__ import annotations

from collections.abc import Callable

from tracker.errors import TrackerError, shorten
from tracker.nets.layers import (
    INPUT,
    BatchNorm,
    Concat,
    ConvTranspose,
    Network,
    ReLU,
    Sigmoid,
    Softmax,
    Upsample,
    conv,
    maxpool,
)

CONV_TYPES = ("standard", "separable", "pointwise")

# block(net, prefix, source, filters, encoder) -> (skip, out): ``skip`` feeds the decoder's
# concatenation, ``out`` continues; they differ when an encoder block down-samples by itself.
Block = Callable[[Network, str, str, int, bool], tuple[str, str]]


def parse_size(text: str | int, dims: int) -> tuple[int, ...]:
    """'128' -> (128, 128); '64x64x32' -> (64, 64, 32) for 3-D."""
    parts = str(text).lower().replace("×", "x").split("x")
    try:
        size = tuple(int(p) for p in parts)
    except ValueError:
        raise TrackerError(f"input size '{shorten(str(text))}' is not N or {'x'.join(['N'] * dims)}") from None
    if len(size) == 1:
        size *= dims
    if len(size) != dims or min(size) < 1:
        raise TrackerError(f"input size '{shorten(str(text))}' needs {dims} positive sizes for a {dims}-D net")
    return size


def _check(size: tuple[int, ...], depth: int, base_filters: int, classes: int, in_channels: int) -> None:
    if not 1 <= depth <= 8:
        raise TrackerError(f"depth {depth} is out of range 1..8")
    if min(base_filters, classes, in_channels) < 1:
        raise TrackerError("base filters, classes and input channels must be at least 1")
    if any(s % 2**depth for s in size):
        raise TrackerError(f"input size {'x'.join(map(str, size))} is not divisible by 2^depth = {2**depth}")


def _unet(net: Network, depth: int, base: int, block: Block, down: Callable, up: Callable) -> str:
    """Build the U and return the last decoder layer's name."""
    skips, x = [], INPUT
    for level in range(1, depth + 1):
        skip, x = block(net, f"enc{level}", x, base * 2 ** (level - 1), True)
        skips.append(skip)
        if x == skip:  # the block did not down-sample by itself
            x = net.add(f"pool{level}", down())
    _, x = block(net, "mid", x, base * 2**depth, False)
    for level in range(depth, 0, -1):
        x = up(net, f"up{level}", x, base * 2 ** (level - 1))
        x = net.add(f"concat{level}", Concat(), x, skips[level - 1])
        _, x = block(net, f"dec{level}", x, base * 2 ** (level - 1), False)
    return x


def unet2d(
    input_size: str = "128",
    in_channels: int = 3,
    base_filters: int = 32,
    depth: int = 4,
    classes: int = 4,
    conv_type: str = "standard",
    second_stride: int = 1,
) -> Network:
    size = parse_size(input_size, 2)
    _check(size, depth, base_filters, classes, in_channels)
    if conv_type not in CONV_TYPES:
        raise TrackerError(f"conv type '{conv_type}' is not one of {', '.join(CONV_TYPES)}")
    if second_stride not in (1, 2):
        raise TrackerError(f"second-conv stride {second_stride} is not 1 or 2")
    options = dict(
        input_size="x".join(map(str, size)),
        in_channels=in_channels,
        base_filters=base_filters,
        depth=depth,
        classes=classes,
        conv_type=conv_type,
        second_stride=second_stride,
    )
    notes = [
        "paper 000's U-Net: two 3x3 same convolutions + ReLU per block, 2x2 max-pool down, nearest 2x "
        "up-sampling, skip concatenation, 1x1 convolution to the classes, sigmoid",
        "conv type: standard (3x3), separable (3x3 depthwise then 1x1 pointwise), pointwise (1x1)",
    ]
    if second_stride == 2:
        notes.append(
            "lightweight variant: each encoder block's second convolution has stride 2 and does "
            "the down-sampling in place of the max-pool; the skip is taken after the first convolution"
        )
    net = Network("unet2d", (in_channels, *size), options, notes)

    def convolve(name: str, src: str, filters: int, stride: int) -> str:
        channels = net.shape_of(src)[0]
        if conv_type == "pointwise":
            return net.add(name, conv(filters, 1, stride), src)
        if conv_type == "separable":
            dw = net.add(f"{name}_dw", conv(channels, 3, stride, pad=1, groups=channels), src)
            return net.add(f"{name}_pw", conv(filters, 1), dw)
        return net.add(name, conv(filters, 3, stride, pad=1), src)

    def block(net: Network, prefix: str, src: str, filters: int, encoder: bool) -> tuple[str, str]:
        stride = second_stride if encoder else 1
        convolve(f"{prefix}_conv1", src, filters, 1)
        first = net.add(f"{prefix}_relu1", ReLU())
        convolve(f"{prefix}_conv2", first, filters, stride)
        out = net.add(f"{prefix}_relu2", ReLU())
        return (first if stride == 2 else out), out

    x = _unet(
        net,
        depth,
        base_filters,
        block,
        down=lambda: maxpool(2, 2),
        up=lambda net, name, src, f: net.add(name, Upsample(2), src),
    )
    net.add("out_conv", conv(classes, 1), x)
    net.add("sigmoid", Sigmoid())
    return net


def unet3d(
    input_size: str = "128", in_channels: int = 1, base_filters: int = 32, depth: int = 4, classes: int = 3
) -> Network:
    size = parse_size(input_size, 3)
    _check(size, depth, base_filters, classes, in_channels)
    options = dict(
        input_size="x".join(map(str, size)),
        in_channels=in_channels,
        base_filters=base_filters,
        depth=depth,
        classes=classes,
    )
    notes = [
        "3-D U-Net (papers 001/002): two 3x3x3 convolutions + batch norm + ReLU per block, 2x2x2 max-pool "
        "down, 2x2x2 stride-2 transposed convolution up, skip concatenation, 1x1x1 convolution, softmax",
        "convolutions before batch norm carry no bias (the norm's shift replaces it)",
    ]
    net = Network("unet3d", (in_channels, *size), options, notes)

    def block(net: Network, prefix: str, src: str, filters: int, encoder: bool) -> tuple[str, str]:
        x = src
        for i in (1, 2):
            net.add(f"{prefix}_conv{i}", conv(filters, 3, pad=1, dims=3, bias=False), x)
            net.add(f"{prefix}_bn{i}", BatchNorm())
            x = net.add(f"{prefix}_relu{i}", ReLU())
        return x, x

    x = _unet(
        net,
        depth,
        base_filters,
        block,
        down=lambda: maxpool(2, 2, dims=3),
        up=lambda net, name, src, f: net.add(name, ConvTranspose(f, (2, 2, 2), (2, 2, 2)), src),
    )
    net.add("out_conv", conv(classes, 1, dims=3), x)
    net.add("softmax", Softmax())
    return net
