"""The op registry: each op family (tracker/ops/<op>.py) registers itself here with everything
that is known about it, and everything else (the executor, the selftest, the benchmark, the
compile check, ``tracker kernels``, the experiments, ``--variant``) loops over the registry.

An ``Op`` owns its variants, each a ``PhaseLaunch`` per phase: the kernels it launches, in order, and
the function that launches them. Its compile-time parameters (``defines``) are handed to NVRTC
as ``-D`` options, so CUDA and Python read the same number. A variant name the registry does not
know raises before anything launches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tracker.errors import TrackerError, comma_list, unknown
from tracker.ops.launch import Arrays, Backend

if TYPE_CHECKING:
    from tracker.ops.gemm import Gemm, Tile  # gemm imports this module: types only

Launcher = Callable[..., None]  # (backend, arrays, **layer parameters) -> None


@dataclass(frozen=True)
class Kernel:
    source: str  # a file under kernels/
    name: str

    @classmethod
    def parse(cls, text: str) -> Kernel:
        """'conv2d.cu:im2col' -> Kernel('conv2d.cu', 'im2col')."""
        source, _, name = text.partition(":")
        return cls(source, name)


@dataclass(frozen=True)
class PhaseLaunch:
    """How one variant runs one phase: its kernels, in launch order, and its launcher. ``op``,
    ``phase`` and ``variant`` are filled in when the variant is added to its op."""

    run: Launcher
    kernels: tuple[Kernel, ...]
    note: str = ""
    tunable: bool = False  # its launcher takes ``tile``, a GEMM schedule (tracker/ops/gemm.Tile)
    defines: tuple[tuple[str, int], ...] = ()  # -D sizes its launches compile with beyond the tile's
    op: str = ""
    phase: str = ""
    variant: str = ""

    @property
    def key(self) -> str:
        return f"{self.op}/{self.phase}/{self.variant}"

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(k.source for k in self.kernels))


def launch(
    run: Launcher, *kernels: str, note: str = "", tunable: bool = False, defines: tuple[tuple[str, int], ...] = ()
) -> PhaseLaunch:
    """``launch(fn, 'conv2d.cu:im2col', 'gemm.cu:gemm_nn')``: a PhaseLaunch from 'source:kernel' names,
    each named once (the split-K reduction serves a GEMM and the bias gradient alike)."""
    return PhaseLaunch(run, tuple(Kernel.parse(k) for k in dict.fromkeys(kernels)), note, tunable, defines)


@dataclass(frozen=True)
class Variant:
    """One implementation of an op. ``absorbs``: the kind of a following layer it folds into its
    epilogue (the fused conv absorbs a ReLU, which then launches nothing); ``in_place``: the op's
    output is its inputs' storage, which their producers write (the concatenation's slices), so it
    launches nothing; ``fallback``: the variant that runs instead where the plan allows neither
    (no such layer to absorb; inputs that cannot be laid out in place). An in-place variant's
    launches are its fallback's, what runs where it cannot be in place."""

    name: str
    launches: dict[str, PhaseLaunch]
    absorbs: str | None = None
    fallback: str | None = None
    in_place: bool = False
    # The selftest's tolerance over the op's: an algorithm that trades rounding for multiplies
    # (Winograd's transforms) is held to a bound set from its measured error.
    error_scale: float = 1.0
    # Where (case, phase) its own algorithm runs (None: everywhere); elsewhere its launches run
    # another variant's kernels (Winograd and FFT: the shared variant's implicit GEMM on strided layers)
    applies: Callable[[Case, str], bool] | None = None
    # The GEMM its tiled launch at (case, phase) runs, as its launcher sizes it (Winograd's and FFT's
    # batched GEMMs, whose M and N are channel counts; None where it runs another's kernels): the
    # default plan fits the tile to that M and N (tracker/ops/gemm.fitted)
    gemm: Callable[[Case, str], Gemm | None] | None = None
    # Its forward saves each window's maximum for its backward (max-pool `shared`): the executor
    # allocates the ``argmax`` array (int32, the output's shape) for its layers, and no others
    saves_argmax: bool = False


@dataclass(frozen=True)
class Case:
    """One op at one shape, for the selftest and the benchmark: the input shapes (``x``, and
    ``w`` for an op with weights) and the layer's parameters; ``layer`` names where they come from."""

    op: str
    layer: str
    shapes: dict[str, tuple[int, ...]]
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Op:
    """An op family: the layer kind it runs, its phases, its variants (the first registered is
    the baseline of the variants experiment), its default, its ``-D`` parameters, and the hooks
    the executor, the selftest and the benchmark call."""

    kind: str
    phases: tuple[str, ...]
    default: str
    params: Callable[[Any], dict[str, Any]]  # a network Layer's parameters, as the launchers take them
    arrays: Callable[[Case], dict[str, tuple[int, ...]]]  # every array a case's phases touch, by role
    check: Callable[..., None]  # selftest: (Check, rng) -> compares every output with the reference
    small_cases: tuple[Case, ...]  # shapes that reach every code path, cheap enough to emulate
    weights: Callable[[Any], tuple[int, ...] | None] = lambda layer: layer.op.weight_shape(list(layer.input_shapes))
    # what a Layer asks that the kernels cannot do ('3-D', 'grouped'), or None: they run it
    unsupported: Callable[[Any], str | None] = lambda layer: None
    library: Callable[[Case, str], Callable[[], Any]] | None = None  # PyTorch's call of a phase (benchmark)
    torch_forward: Callable[..., Any] | None = None  # (h, params, labels, **params) -> PyTorch forward
    defines: dict[str, int] = field(default_factory=dict)
    flat_input: bool = False  # the launchers see the input as (batch, features): linear
    # the layers it runs: of kind ``layer_kind`` (default: ``kind``) with ``dims`` spatial
    # dimensions (0: any); conv runs 2-D convolutions and conv3d 3-D ones, each with kernels of its own
    layer_kind: str = ""
    dims: int = 0
    variants: dict[str, Variant] = field(default_factory=dict)
    # the variant the default plan runs at a case's phase, by a rule from measurements (None: ``default``
    # everywhere); --variant and `tracker tune` override it, and --untuned plans ``default``
    rule: Callable[[Case, str], str] | None = None

    def serves(self, layer: Any) -> bool:
        """Whether this op runs ``layer`` (a network Layer)."""
        return (self.layer_kind or self.kind) == layer.kind and self.dims in (0, len(layer.output_shape) - 1)

    def add(
        self,
        name: str,
        absorbs: str | None = None,
        fallback: str | None = None,
        error_scale: float = 1.0,
        in_place: bool = False,
        applies: Callable[[Case, str], bool] | None = None,
        saves_argmax: bool = False,
        gemm: Callable[[Case, str], Gemm | None] | None = None,
        **launches: PhaseLaunch,
    ) -> Variant:
        """Register variant ``name`` with a PhaseLaunch for each of the op's phases."""
        if set(launches) != set(self.phases):
            raise TrackerError(
                f"{self.kind} variant {name!r} must launch {', '.join(self.phases)}; "
                f"got {', '.join(launches) or 'nothing'}"
            )
        if name in self.variants:
            raise TrackerError(f"{self.kind} already has a variant {name!r}")
        filled = {phase: replace(launches[phase], op=self.kind, phase=phase, variant=name) for phase in self.phases}
        self.variants[name] = Variant(
            name,
            filled,
            absorbs,
            fallback,
            in_place=in_place,
            error_scale=error_scale,
            applies=applies,
            saves_argmax=saves_argmax,
            gemm=gemm,
        )
        return self.variants[name]

    def applying(self, case: Case, phase: str) -> tuple[str, ...]:
        """The variants whose own algorithm runs ``case``'s ``phase`` (elsewhere a variant runs
        another's kernels: Winograd and FFT on conv1's stride 4 are the implicit GEMM)."""
        return tuple(v.name for v in self.variants.values() if v.applies is None or v.applies(case, phase))

    def rivals(self, case: Case, phase: str) -> tuple[str, ...]:
        """The variants that run ``case``'s ``phase`` each by an algorithm of its own (what
        `tracker tune` races there): applying there, and neither absorbing a layer (that changes
        the plan) nor in place."""
        return tuple(
            name
            for name in self.applying(case, phase)
            if self.variants[name].absorbs is None and not self.variants[name].in_place
        )

    def ruled(self, case: Case, phase: str) -> str:
        """The variant the default plan runs at ``case``'s ``phase``: the rule's, else the default."""
        return self.rule(case, phase) if self.rule else self.default

    def variant(self, name: str) -> Variant:
        if name not in self.variants:
            raise unknown(f"{self.kind} variant", name, list(self.variants))
        return self.variants[name]

    def launch(
        self, backend: Backend, variant: str, phase: str, arrays: Arrays, tile: Tile | None = None, **params: Any
    ) -> None:
        """Launch ``variant``'s kernels of ``phase`` on ``backend``. ``tile``: a GEMM schedule
        for a launch built on the GEMM; other launches ignore it."""
        run = self.variant(variant).launches[phase]
        if tile is not None and run.tunable:
            params["tile"] = tile
        run.run(backend, arrays, **params)

    def case(self, layer: Any, batch: int) -> Case:
        """The selftest and benchmark case of a network layer at ``batch``."""
        x = (batch, math.prod(layer.input_shapes[0])) if self.flat_input else (batch, *layer.input_shapes[0])
        w = self.weights(layer)
        return Case(self.kind, layer.name, {"x": x, **({"w": w} if w else {})}, self.params(layer))


class Registry:
    """The ops by the layer kind they run, in registration order."""

    def __init__(self) -> None:
        self.ops: dict[str, Op] = {}

    def register(self, op: Op) -> Op:
        if op.kind in self.ops:
            raise TrackerError(f"op {op.kind!r} is registered twice")
        self.ops[op.kind] = op
        return op

    def __getitem__(self, kind: str) -> Op:
        if kind not in self.ops:
            raise unknown("op", kind, list(self.ops))
        return self.ops[kind]

    def __contains__(self, kind: object) -> bool:
        return kind in self.ops

    def find(self, layer: Any) -> Op | None:
        """The op that runs network layer ``layer`` (``Op.serves``), or None."""
        return next((op for op in self if op.serves(layer)), None)

    def of(self, layer: Any) -> Op:
        """The op that runs ``layer``; a layer no op runs is a one-line error."""
        op = self.find(layer)
        if op is None:
            raise TrackerError(f"layer {layer.name}: no kernels run a {len(layer.output_shape) - 1}-D {layer.kind} yet")
        return op

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops.values())

    def launches(self) -> Iterator[PhaseLaunch]:
        """Every (op, phase, variant): the kernel table."""
        for op in self:
            for variant in op.variants.values():
                yield from variant.launches.values()

    def variant_names(self) -> tuple[str, ...]:
        """Every variant name, in registration order ('global' first: the baseline)."""
        return tuple(dict.fromkeys(name for op in self for name in op.variants))

    def defines(self) -> dict[str, int]:
        """Every op's compile-time parameters; a name defined twice must agree."""
        merged: dict[str, int] = {}
        for op in self:
            for name, value in op.defines.items():
                if merged.setdefault(name, value) != value:
                    raise TrackerError(f"-D{name} is {merged[name]} in one op and {value} in {op.kind}")
        return merged

    def parse_variants(self, spec: str | None) -> dict[str, str]:
        """``--variant``: ``shared`` picks shared for every op that has it; ``conv=fused,lrn=shared``
        picks per op. None means each op's default; an empty spec is refused."""
        if spec is None:
            return {}
        items = comma_list(spec, "--variant", "shared or conv=fused,lrn=shared")
        if "=" not in spec:
            name = spec.strip()
            chosen = {op.kind: name for op in self if name in op.variants}
            if not chosen:
                raise unknown("variant", name, sorted(self.variant_names()))
            return chosen
        chosen = {}
        for item in items:
            kind, _, name = (part.strip() for part in item.partition("="))
            variant = self[kind].variant(name).name
            if kind in chosen:
                raise TrackerError(f"--variant names op {kind} twice ({chosen[kind]}, {variant}): one variant per op")
            chosen[kind] = variant
        return chosen

    def check_chosen(self, chosen: dict[str, str]) -> None:
        """A variant map from an API or workload caller (which skips parse_variants) names known
        ops and variants."""
        for kind, name in chosen.items():
            self[kind].variant(name)


OPS = Registry()
