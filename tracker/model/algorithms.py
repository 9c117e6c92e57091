"""What each convolution algorithm costs, per layer phase (paper 004, Figs. 8 and 9): the
multiplies of its arithmetic stage, the FLOPs of its transforms and the workspace it holds.

    direct          every multiply of the definition: K x C/groups x R x S per output
    implicit_gemm   the same multiplies as one GEMM, operands gathered on the fly: no workspace
    gemm            the same multiplies after an explicit im2col: its buffer (a chunk of images)
    winograd_f2     Winograd F(2x2, rxr): 2x2 outputs a tile from (2+r-1)^2 products
    winograd_f4     Winograd F(4x4, rxr): 4x4 outputs a tile from (4+r-1)^2 products
    fft             n x n real FFTs (n the padded input, up to 32; 32x32 tiles beyond, overlap-
                    save): 4 real multiplies a complex product over the half spectrum

Winograd and FFT apply to stride-1 convolutions only (AlexNet's conv1, at stride 4, runs
direct where they are asked for, and says so); each phase is a stride-1 convolution there too:
bwd_data convolves dy with the flipped filters, bwd_weight correlates the input with dy
(Winograd F(rxr, mxm), as Lavin & Gray do). Per (image, input channel, output channel), conv2
of AlexNet (5x5, 27x27 out) takes 18,225 multiplies direct, 7,056 in F(2x2,5x5), 3,136 in
F(4x4,5x5) and 2,176 in a 32x32 FFT; conv3-5 (3x3, 13x13) 1,521 direct, 784 in F(2x2,3x3), 576
in F(4x4,3x3) and in a 16x16 FFT.

Transform FLOPs are counted as dense matrix products (B^T d B, G g G^T, A^T m A) and an n x n
real FFT as 5 n^2 log2 n: upper bounds, as hand-scheduled transforms skip the zeros and ones.
Workspace: the transformed inputs, filters and products (Winograd), the three spectra (FFT),
the im2col chunk (gemm), in elements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

from tracker.errors import unknown
from tracker.nets.layers import Layer

ALGORITHMS = ("direct", "implicit_gemm", "gemm", "winograd_f2", "winograd_f4", "fft")
FFT_TILE = 32  # cuDNN's FFT tiling size: beyond it, 32x32 tiles
COL_FLOATS = 64 * 2**20  # the GEMM convolution's im2col buffer holds this many floats (256 MiB), or one image


def col_images(batch: int, per_image: int) -> int:
    """Images per chunk of the GEMM convolution (the conv `gemm` variant): the batch in as few
    even chunks as keep an im2col buffer of ``per_image`` floats an image within COL_FLOATS."""
    chunks = -(-batch // max(1, COL_FLOATS // per_image))
    return -(-batch // chunks)


@dataclass(frozen=True)
class AlgorithmCost:
    algorithm: str  # what the model costs: the one asked for, or direct where it does not apply
    multiplies: int  # of the arithmetic stage (each accumulates: 2 FLOPs)
    transform_flops: int
    workspace: int  # elements
    note: str  # the rule, or why the asked algorithm does not apply

    @property
    def flops(self) -> int:
        return 2 * self.multiplies + self.transform_flops


def check_algorithm(name: str) -> str:
    if name not in ALGORITHMS:
        raise unknown("algorithm", str(name), list(ALGORITHMS))
    return name


def not_applicable(layer: Layer, algorithm: str) -> str | None:
    """Why ``algorithm`` cannot run ``layer`` (None: it can)."""
    op = cast(Any, layer.op)
    if algorithm in ("winograd_f2", "winograd_f4", "fft"):
        if any(s != 1 for s in op.stride):
            return f"{algorithm} needs stride 1 ({layer.name} has stride {'x'.join(map(str, op.stride))})"
        if len(op.kernel) != 2 or op.kernel[0] != op.kernel[1]:
            return f"{algorithm} is modelled for square 2-D filters ({layer.name}: {'x'.join(map(str, op.kernel))})"
    return None


def conv_cost(layer: Layer, phase: str, batch: int, algorithm: str) -> AlgorithmCost:
    """The cost of one phase of a conv layer run by ``algorithm`` (direct where it does not apply)."""
    check_algorithm(algorithm)
    why = not_applicable(layer, algorithm)
    if why:
        return _direct(layer, batch, "direct", f"{why}: direct")
    if algorithm in ("direct", "implicit_gemm", "gemm"):
        return _direct(layer, batch, algorithm, "")
    return _winograd(layer, phase, batch, algorithm) if algorithm.startswith("winograd") else _fft(layer, phase, batch)


def _geometry(layer: Layer, phase: str) -> tuple[int, int, int, int, int]:
    """(input channels, output channels, output height, width, filter size r) of the phase as a
    stride-1 convolution; bwd_weight's 'output' is dy, whose tiles its products run over."""
    op = cast(Any, layer.op)
    c, h, w = layer.input_shapes[0]
    k, p, q = layer.output_shape
    r = op.kernel[0]
    if phase == "bwd_data":
        return k, c, h, w, r
    return c, k, p, q, r


def _direct(layer: Layer, batch: int, algorithm: str, note: str) -> AlgorithmCost:
    op = cast(Any, layer.op)
    c = layer.input_shapes[0][0]
    per_image = math.prod(layer.output_shape) * (c // op.groups) * math.prod(op.kernel)
    workspace = 0
    if algorithm == "gemm":
        col = math.prod(layer.output_shape[1:]) * (c // op.groups) * math.prod(op.kernel)
        workspace = col_images(batch, col) * col
    rule = {
        "direct": "K x C/groups x R x S multiplies per output",
        "implicit_gemm": "the direct multiplies as one GEMM, operands gathered on the fly",
        "gemm": "the direct multiplies after an explicit im2col (its buffer: a chunk of images)",
    }[algorithm]
    return AlgorithmCost(algorithm, batch * per_image, 0, workspace, note or rule)


def _winograd(layer: Layer, phase: str, batch: int, algorithm: str) -> AlgorithmCost:
    cin, cout, p, q, r = _geometry(layer, phase)
    groups = cast(Any, layer.op).groups
    m = 2 if algorithm == "winograd_f2" else 4
    a = m + r - 1  # the tile's side in the transformed domain
    tiles = batch * math.ceil(p / m) * math.ceil(q / m)
    pairs = cin * cout // groups
    multiplies = tiles * a * a * pairs
    data = tiles * cin * 4 * a**3  # B^T d B
    filters = pairs * (2 * a * r * r + 2 * a * a * r)  # G g G^T
    outputs = tiles * cout * (2 * m * a * a + 2 * m * m * a)  # A^T m A
    workspace = a * a * (tiles * cin + pairs + tiles * cout)
    return AlgorithmCost(
        algorithm,
        multiplies,
        data + filters + outputs,
        workspace,
        f"Winograd F({m}x{m},{r}x{r}): {a}x{a} products per {m}x{m} output tile; transforms as dense matrix products",
    )


def fft_side(p: int, q: int, r: int) -> int:
    """The FFT's tile side n for p x q outputs of an r x r filter: the power of two that holds a
    whole output row and the filter's overhang (the input its outputs read, padding included),
    FFT_TILE at most (32x32 tiles beyond, overlapping by r - 1). Our fft variant runs the same."""
    return min(FFT_TILE, 1 << (max(p, q) + r - 2).bit_length())


def _fft(layer: Layer, phase: str, batch: int) -> AlgorithmCost:
    cin, cout, p, q, r = _geometry(layer, phase)
    groups = cast(Any, layer.op).groups
    n = fft_side(p, q, r)
    step = n - r + 1  # outputs per tile side (overlap-save)
    tiles = batch * math.ceil(p / step) * math.ceil(q / step)
    spectrum = n * (n // 2 + 1)  # complex values of a real n x n FFT
    pairs = cin * cout // groups
    multiplies = 4 * tiles * pairs * spectrum
    transforms = (tiles * cin + pairs + tiles * cout) * round(5 * n * n * math.log2(n))
    workspace = 2 * spectrum * (tiles * cin + pairs + tiles * cout)
    return AlgorithmCost(
        "fft",
        multiplies,
        transforms,
        workspace,
        f"{n}x{n} FFT{' tiles' if tiles > batch else ''}: 4 real multiplies per complex product "
        "over the half spectrum; an FFT 5 n^2 log2 n FLOPs",
    )
