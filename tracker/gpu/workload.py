"""What a GPU profile runs, and what it launched.

``Workload`` is one value from where a profile enters (the CLI, or ``tracker.profile.profile``
for a library caller) through ``profile_workload`` to the child process a collector profiles: the network, batch,
variants, phases, L1
policy, iterations, GEMM tiles and the plan (``steps``: which variant runs each layer phase, in
which order), planned once in the parent. Pass 1 and pass 2 run the same steps, so the profiled
launches line up with pass 1's log one for one. Its values are checked where it is made.

``LoggedLaunch`` is one row of pass 1's launch log: it knows its invocation, layer, phase and NVTX
range, so the join (tracker/profilers/join.py) and the store need nothing else to place it.

The child a collector profiles runs ``Workload.to_json()`` (tracker/implementations/child.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

from tracker.errors import TrackerError, whole_number

if TYPE_CHECKING:
    from tracker.gpu.network import Step
    from tracker.nets import Network

MAX_REPEAT = 1000  # --repeat and --warmup read these
MAX_WARMUP = 100


class PlannedStep(NamedTuple):
    """One layer phase of the plan, by name: what the child is told to run."""

    layer: str
    phase: str
    variant: str  # tracker.gpu.network.LAUNCHES_NOTHING: fused into the layer before, or in place


@dataclass(frozen=True)
class Workload:
    network: str
    options: dict = field(default_factory=dict)
    batch: int = 1
    variants: dict = field(default_factory=dict)  # op -> variant, as --variant gives it
    phases: str = "both"
    l1_bypass: bool = False
    repeat: int = 1
    warmup: int = 1
    tiles: dict = field(default_factory=dict)  # 'layer/phase' -> GEMM tile, tuned or fitted, where not the default
    tuned_variants: dict = field(default_factory=dict)  # 'layer/phase' -> the variant tune chose, not the plan's
    steps: tuple[PlannedStep, ...] = ()  # the plan; empty until ``planned``
    implementation: str = "ours"  # who runs it (tracker/implementations), which checks the options it takes
    tf32: bool = False  # torch: let cuDNN and cuBLAS use TF32 tensor cores
    cudnn_benchmark: bool = False  # torch: let cuDNN time its algorithms and keep the fastest
    staged: bool = False  # the L1-bypass build's loaders (operands staged through registers), L1 cached

    def __post_init__(self) -> None:
        check(self.batch, self.phases, self.variants, self.repeat, self.warmup)
        object.__setattr__(self, "steps", tuple(PlannedStep(*s) for s in self.steps))  # JSON gives lists

    @classmethod
    def of(cls, net: Network, batch: int, **settings) -> Workload:
        """The workload of ``net`` (the caller's, not a second build of it)."""
        workload = cls(net.name, dict(net.options), batch, **settings)
        vars(workload)["net"] = net  # primes the cached property
        return workload

    @cached_property
    def net(self) -> Network:
        if is_module_spec(self.network):  # a user's PyTorch model: only the library arm, above, can trace it
            raise TrackerError(
                f"{self.network} is a PyTorch model: its network comes from "
                "tracker.library.torch_module.network, handed to Workload.of"
            )
        from tracker.nets import build

        return build(self.network, **self.options)

    @property
    def l1_policy(self) -> str:
        """The build its kernels run (tracker.gpu.kernels.BUILDS), recorded on every launch."""
        from tracker.gpu.kernels import STAGED

        return "cg" if self.l1_bypass else STAGED if self.staged else "ca"

    def planned(
        self, steps: Sequence[Step], tiles: dict[str, str], tuned_variants: dict[str, str] | None = None
    ) -> Workload:
        """This workload with its plan (``tracker.gpu.network.plan``'s steps, planned once by the
        caller, with the variants `tracker tune` chose where ``tuned_variants`` says) and the
        GEMM tiles its GEMM-shaped steps run where not the default (tuned, or fitted to the shape)."""
        return self._with(
            steps=tuple(PlannedStep(s.layer.name, s.phase, s.variant) for s in steps),
            tiles=dict(tiles),
            tuned_variants=dict(tuned_variants or {}),
        )

    def measuring(self, repeat: int) -> Workload:
        """This workload with ``repeat`` measured iterations: what pass 2's child runs when it
        profiles the first of pass 1's (tracker.profilers.counted)."""
        return self._with(repeat=repeat)

    def _with(self, **changes) -> Workload:
        """This workload with ``changes``, keeping the network it built (not a second build of it)."""
        done = replace(self, **changes)
        vars(done)["net"] = self.net
        return done

    def planned_in_training_order(self) -> Workload:
        """The plan of an implementation that has no variants and no tiles to choose: every layer
        phase in ``Network.training_order``, its variant the implementation's name."""
        steps = tuple(
            PlannedStep(layer.name, phase, self.implementation) for layer, phase in self.net.training_order(self.phases)
        )
        done = replace(self, steps=steps, tiles={})
        vars(done)["net"] = self.net
        return done

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, spec: str) -> Workload:
        return cls(**json.loads(spec))


def is_module_spec(network: str) -> bool:
    """A user's PyTorch model named MODULE:FUNCTION, not one of tracker's networks."""
    return ":" in network


def check(batch: int, phases: str, variants: dict[str, str], repeat: int, warmup: int) -> None:
    """A workload's values, checked as the CLI checks its options (the library's callers and
    the child's JSON skip the CLI)."""
    from tracker.model.roofline import check_batch, check_phases
    from tracker.ops import OPS

    check_batch(batch)
    check_phases(phases)
    OPS.check_chosen(variants)
    whole_number(repeat, "repeat", 1, MAX_REPEAT)
    whole_number(warmup, "warmup", 0, MAX_WARMUP)


@dataclass(frozen=True)
class LoggedLaunch:
    """One kernel launch of pass 1, in invocation order across the measured iterations."""

    invocation: int
    layer_id: int
    layer: str
    phase: str
    repeat: int  # which measured iteration
    kernel_name: str
    variant: str
    l1_policy: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    registers: int | None
    time_ms: float | None  # None: untimed (under a profiler)
    algorithm: str | None = None  # its layer phase's algorithm, as the phase's kernel names say (``tagged``)
    role: str | None = None  # the kernel's part in it: math, transform, reduction, fill, offsets, epilogue, other
    in_range: bool = True  # False: launched by the autograd engine between two nodes (tracker/library/kineto.py)
    start_ns: int | None = None  # when it began, after the first measured launch began; None: durations only

    @property
    def range(self) -> str:
        """The NVTX range it ran in, as the join checks it: 'layer/phase'."""
        return f"{self.layer}/{self.phase}"

    def row(self) -> dict:
        """The launch table's row (without run_id)."""
        (grid_x, grid_y, grid_z), (block_x, block_y, block_z) = self.grid, self.block
        return dict(
            invocation=self.invocation,
            layer_id=self.layer_id,
            phase=self.phase,
            repeat=self.repeat,
            kernel_name=self.kernel_name,
            variant=self.variant,
            l1_policy=self.l1_policy,
            grid_x=grid_x,
            grid_y=grid_y,
            grid_z=grid_z,
            block_x=block_x,
            block_y=block_y,
            block_z=block_z,
            shared_bytes=self.shared_bytes,
            registers=self.registers,
            time_ms=self.time_ms,
            start_ns=self.start_ns,
            algorithm=self.algorithm,
            role=self.role,
        )


def tagged(launches: Sequence[LoggedLaunch]) -> list[LoggedLaunch]:
    """The launches with their layer phase's algorithm (``kernel_names.phase_algorithm`` over the
    phase's launches in that iteration) and each kernel's role in it; a kernel no rule names is
    the math of a phase that runs no convolution or GEMM (a ReLU's kernel is the ReLU)."""
    from tracker.kernel_names import classify, phase_algorithm

    names: dict[tuple, list[str]] = {}
    for k in launches:
        names.setdefault((k.layer_id, k.phase, k.repeat), []).append(k.kernel_name)
    algorithms = {key: phase_algorithm(group) for key, group in names.items()}
    out = []
    for k in launches:
        algorithm, role = algorithms[(k.layer_id, k.phase, k.repeat)], classify(k.kernel_name).role
        out.append(replace(k, algorithm=algorithm, role="math" if role == "other" and algorithm is None else role))
    return out
