"""Networks by name, with the options each one takes.

``build("unet2d", depth=3)`` returns a ``Network`` whose layers carry resolved shapes and stable
IDs in network order. ``OPTIONS`` is the one table of network options: the CLI makes its flags
from it, and ``build`` refuses an option the network does not take.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tracker.errors import TrackerError, unknown
from tracker.nets.alexnet import alexnet
from tracker.nets.layers import Layer, Network, Shape, numel
from tracker.nets.unet import CONV_TYPES, unet2d, unet3d

__all__ = ["NETWORKS", "OPTIONS", "Layer", "Network", "Shape", "build", "numel"]


@dataclass(frozen=True)
class NetOption:
    name: str
    type: type
    help: str
    choices: tuple = ()


OPTIONS = (
    NetOption("input_size", str, "input size: N, or HxW (2-D) / DxHxW (3-D)"),
    NetOption("in_channels", int, "input channels"),
    NetOption("base_filters", int, "filters of the first level (doubling per level)"),
    NetOption("depth", int, "down-sampling levels"),
    NetOption("classes", int, "output classes"),
    NetOption("conv_type", str, "convolution type", CONV_TYPES),
    NetOption("second_stride", int, "stride of each encoder block's second convolution", (1, 2)),
)


@dataclass(frozen=True)
class NetworkEntry:
    build: Callable[..., Network]
    summary: str
    options: tuple[str, ...]


NETWORKS: dict[str, NetworkEntry] = {
    "alexnet": NetworkEntry(alexnet, "AlexNet, one tower, 227x227 (paper 003)", ()),
    "unet2d": NetworkEntry(
        unet2d,
        "2-D U-Net, 128x128, 32 base filters (paper 000)",
        ("input_size", "in_channels", "base_filters", "depth", "classes", "conv_type", "second_stride"),
    ),
    "unet3d": NetworkEntry(
        unet3d,
        "3-D U-Net with batch norm, 128^3 (papers 001/002)",
        ("input_size", "in_channels", "base_filters", "depth", "classes"),
    ),
}


def axis(text: str) -> tuple[str, tuple]:
    """A network option and the values an experiment sweeps it over, from ``NAME=V,V,...``
    (``input_size=64,96,128``; dashes as in the flags): each value of the option's type and
    among its choices; a network checks its own when it is built."""
    from tracker.errors import comma_list, parse_whole_number, shorten, unknown

    name, sep, values = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep:
        raise TrackerError(f"'{shorten(text)}' is not NAME=V,V,... (e.g. input_size=64,96,128)")
    option = next((o for o in OPTIONS if o.name == name), None)
    if option is None:
        raise unknown("network option", name, [o.name for o in OPTIONS])
    parsed: list = []
    items = comma_list(values, f"the values of {name}", "input_size=64,96,128")
    for value in values.split(",") if option.type is int else items:  # a number unstripped: ' 8' is none
        typed = parse_whole_number(value, name, 1) if option.type is int else option.type(value)
        if option.choices and typed not in option.choices:
            raise TrackerError(f"{name} is one of {', '.join(map(str, option.choices))}, not '{shorten(value)}'")
        parsed.append(typed)
    if len(set(parsed)) != len(parsed):
        raise TrackerError(f"{name} names a value twice: {shorten(values)}")
    return name, tuple(parsed)


def build(name: str, **options) -> Network:
    """The network ``name`` built with ``options`` (None values mean the network's default)."""
    entry = NETWORKS.get(name.lower())
    if entry is None:
        raise unknown("network", name, list(NETWORKS))
    given = {k: v for k, v in options.items() if v is not None}
    extra = sorted(set(given) - set(entry.options))
    if extra:
        flags = ", ".join("--" + k.replace("_", "-") for k in extra)
        takes = ", ".join("--" + k.replace("_", "-") for k in entry.options) or "no options"
        raise TrackerError(f"{name} does not take {flags} (it takes {takes})")
    return entry.build(**given)
