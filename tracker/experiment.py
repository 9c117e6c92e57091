"""``tracker experiment``: a set of runs recorded together to answer one of paper 003's questions.

    l1-bypass   every variant with and without the L1-bypass build (compared per variant)
    fusion      conv and fc with a separate ReLU against the fused kernels
    variants    global vs constant vs shared vs gemm vs fused, each op's kernels where it has one
    batch       the same network at several batch sizes (runtime per layer per batch)
    library     our kernels (tuned) against the same network run by PyTorch (cuDNN, cuBLAS)
    algorithms  each convolution algorithm we have (direct, implicit GEMM, explicit GEMM, Winograd)
                against the default's, per conv layer phase (paper 004)

Each arm is one ``tracker profile`` run; the ``experiment`` row links them (tracker/store) and the
analyses (tracker/analysis/experiments.py) compare each comparison's runs with its baseline. The
analytic model does not see variants or the L1 policy, so only ``batch`` runs on the model backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from tracker.errors import TrackerError
from tracker.model import Device
from tracker.nets import Network
from tracker.gpu.workload import Workload
from tracker.profile import check_options, choose_backend, profile_workload
from tracker.profilers import Options
from tracker.profilers.ncu import Settings as NcuSettings

KINDS = ("l1-bypass", "fusion", "variants", "batch", "library", "algorithms")


@dataclass(frozen=True)
class Arm:
    label: str
    comparison: str
    baseline: bool
    batch: int
    variants: dict[str, str] = field(default_factory=dict)
    l1_bypass: bool = False
    implementation: str = "ours"
    staged: bool = False  # the L1-bypass build's loaders, L1 cached (Workload.staged)


def arms(kind: str, batch: int, batches: tuple[int, ...] = ()) -> list[Arm]:
    """The runs of an experiment, in the order they run. The variant names are the registry's
    (tracker/ops), the first registered ('global') the variants baseline; fusion compares each
    absorbing variant (fused) with its fallback (shared: the same kernels, then a ReLU)."""
    from tracker.ops import OPS

    names = OPS.variant_names()
    if kind == "l1-bypass":  # where the cg build stages what ca copies with cp.async, ca staged beside them
        from tracker.analysis.experiments import BYPASS_ARM, CACHED_ARM, STAGED_ARM

        return [arm for name in names for arm in (
            Arm(name + CACHED_ARM, name, True, batch, OPS.parse_variants(name)),
            Arm(name + BYPASS_ARM, name, False, batch, OPS.parse_variants(name), l1_bypass=True),
            *([Arm(name + STAGED_ARM, name, False, batch, OPS.parse_variants(name), staged=True)]
              if _copies_async(name) else []))]
    if kind == "fusion":
        fused = [(op.kind, v) for op in OPS for v in op.variants.values() if v.absorbs and v.fallback]
        return [Arm("separate", "fusion", True, batch, {op: str(v.fallback) for op, v in fused}),
                Arm("fused", "fusion", False, batch, {op: v.name for op, v in fused})]
    if kind == "variants":
        return [Arm(name, "variants", i == 0, batch, OPS.parse_variants(name)) for i, name in enumerate(names)]
    if kind == "batch":
        sizes = batches or (batch,)
        return [Arm(f"batch {b}", "batch", i == 0, b) for i, b in enumerate(sizes)]
    if kind == "algorithms":
        conv = OPS["conv"]
        return [Arm(f"{algorithm} ({name})", "algorithms", name == conv.default, batch, {"conv": name})
                for algorithm, name in conv_algorithms().items()]
    if kind == "library":  # ours with the tiles `tracker tune` found, as `tracker profile` runs them
        return [Arm("ours", "library", True, batch), Arm("torch", "library", False, batch, implementation="torch")]
    raise TrackerError(f"unknown experiment '{kind}'; known: {', '.join(KINDS)}")


def _copies_async(variant: str) -> bool:
    """Whether the variant's ca build copies operands with cp.async where its cg build stages them
    (kernels/common.cuh): a GEMM-shaped variant of some op."""
    from tracker.ops import OPS

    return any(launch.tunable for op in OPS if variant in op.variants for launch in op.variants[variant].launches.values())


def conv_algorithms() -> dict[str, str]:
    """algorithm, as the analytic model names it -> the first conv variant that runs it, by the
    kernels its forward launches (tracker/kernel_names.py) and a Winograd's output tile: direct
    (global), implicit_gemm (shared), gemm, winograd_f2 (winograd), winograd_f4."""
    from tracker.analysis.experiments import modelled
    from tracker.kernel_names import phase_algorithm
    from tracker.ops import OPS

    found: dict[str, str] = {}
    for name, variant in OPS["conv"].variants.items():
        algorithm = modelled(phase_algorithm(k.name for k in variant.launches["fwd"].kernels), name)
        if algorithm is not None and variant.absorbs is None:
            found.setdefault(algorithm, name)
    return found


def check(kind: str, backend: str, device: Device | None) -> tuple[str, str]:
    """(backend, why) for the experiment, refusing what cannot answer its question."""
    if kind == "library":
        from tracker.library import require_torch

        require_torch(f"experiment {kind}")
    chosen, why, _ = choose_backend(backend, library=kind == "library")
    if chosen == "model" and kind != "batch":
        raise TrackerError(f"experiment {kind} needs a GPU backend (events or ncu): the analytic model does not "
                           f"depend on kernel variants, the L1 policy or who runs the kernels, and here {why}")
    if chosen == "model" and device is None:
        raise TrackerError("experiment batch on the model backend needs --device NAME for the roofline's times")
    return chosen, why


def run_experiment(db: str | None, kind: str, net: Network, batch: int, *, batches: tuple[int, ...] = (),
                   backend: str = "auto", repeat: int = 5, warmup: int = 1, device: Device | None = None,
                   echo: Callable[[str], None] = lambda line: None, ncu: NcuSettings = NcuSettings()) -> int:
    """Run every arm of ``kind`` into ``db``, link the runs in an experiment row; its id."""
    from tracker.store import open_store, recording_experiment

    plan = arms(kind, batch, batches)
    chosen, why = check(kind, backend, device)
    options = Options(ncu)
    check_options(32, options)
    workloads = [Workload.of(net, arm.batch, variants=arm.variants, l1_bypass=arm.l1_bypass, staged=arm.staged,
                             repeat=repeat, warmup=warmup, implementation=arm.implementation)
                 for arm in plan]  # every arm checked before the experiment's row
    echo(f"experiment {kind}: {len(plan)} runs of {net.name} on backend {chosen} ({why})")
    store = open_store(db, write=True)
    settings = dict(batch=batch, batches=list(batches), backend=chosen, repeat=repeat, warmup=warmup,
                    device=device.name if device else None, ncu_cache_control=ncu.cache_control,
                    ncu_clock_control=ncu.clock_control)
    with recording_experiment(store, kind=kind, network=net.name, network_options=net.options,
                              settings=settings) as experiment:
        echo(f"experiment e{experiment.experiment_id} in {store.where}")
        runs_on = backend  # the first arm chooses as profile does (auto may fall back); the rest follow it
        for i, (arm, workload) in enumerate(zip(plan, workloads), 1):
            echo(f"[{i}/{len(plan)}] {arm.label}")
            result = profile_workload(db, workload, backend=runs_on, device=device, options=options,
                                      echo=lambda line: echo(f"    {line}"),
                                      link=lambda session, run_id, arm=arm: experiment.link(
                                          session, run_id, arm.label, arm.comparison, arm.baseline))
            runs_on = result.backend
    store.dispose()
    return experiment.experiment_id

