"""``tracker experiment``: a set of runs recorded together to answer one of paper 003's questions.

    l1-bypass   every variant with and without the L1-bypass build (compared per variant)
    fusion      conv and fc with a separate ReLU against the fused kernels
    variants    global vs constant vs shared vs gemm vs fused, each op's kernels where it has one
    batch       the same network at several batch sizes (runtime per layer per batch)
    library     our kernels (tuned) against the same network run by PyTorch (cuDNN, cuBLAS), with cuDNN's
                heuristic's algorithms and with the fastest cudnn.benchmark finds
    algorithms  each convolution algorithm we have (direct, implicit GEMM, explicit GEMM, Winograd)
                against the default's, per conv layer phase (paper 004)

Each arm is one ``tracker profile`` run, planned as an ``experiment_arm`` row and linked to its run
as the run is created (tracker/store); the analyses (tracker/analysis/experiments.py) compare each
comparison's runs with its baseline. A sweep adds axes: every arm at each of ``--batches`` (batch's
own axis) and on each of ``--gpus``. An executor (tracker/executors) runs the arms: this process one
after another (local), or one cluster job each (slurm) writing into one PostgreSQL store; re-running
an unfinished experiment resumes it. The analytic model does not see variants or the L1 policy, so
only ``batch`` runs on the model backend.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from tracker.errors import ArmTaken, TrackerError
from tracker.gpu.workload import Workload
from tracker.implementations import checked, implementation
from tracker.model import Device, lookup
from tracker.nets import Network
from tracker.profile import ArmHooks, Profile, check_options, choose_backend, predicted_for, profile_workload
from tracker.profilers import Options
from tracker.profilers.ncu import Settings as NcuSettings

if TYPE_CHECKING:
    import pandas as pd

    from tracker.executors import Executor
    from tracker.store import Store

KINDS = ("l1-bypass", "fusion", "variants", "batch", "library", "algorithms", "memory")


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
    gpu: str | None = None  # the GPU kind it runs on (--gpus); None: any
    name: str = ""  # its label before the sweep's axes (batch, GPU, options) were added; "" : the label
    options: dict = field(default_factory=dict)  # network options over the experiment's (--vary)
    cudnn_benchmark: bool = False  # torch: cuDNN times its algorithms and keeps the fastest (its best)

    def row(self) -> dict:
        """Its experiment_arm columns (tracker/store/schema.py)."""
        spec = dict(
            arm=self.name or self.label,
            batch=self.batch,
            variants=self.variants,
            l1_bypass=self.l1_bypass,
            staged=self.staged,
            implementation=self.implementation,
            options=self.options,
            cudnn_benchmark=self.cudnn_benchmark,
        )
        return dict(label=self.label, comparison=self.comparison, baseline=self.baseline, spec=spec, gpu=self.gpu)

    @classmethod
    def of(cls, row) -> Arm:
        """The arm an experiment_arm row planned (one planned by an older tracker may lack the options
        and cudnn_benchmark)."""
        spec = row.spec
        return cls(
            row.label,
            row.comparison,
            row.baseline,
            spec["batch"],
            spec["variants"],
            spec["l1_bypass"],
            spec["implementation"],
            spec["staged"],
            row.gpu,
            spec["arm"],
            spec.get("options", {}),
            spec.get("cudnn_benchmark", False),
        )

    def network(self, net: Network) -> Network:
        """The network it runs: ``net`` (the experiment's), rebuilt with its options if it has any."""
        if not self.options:
            return net
        from tracker.nets import build

        return build(net.name, **{**net.options, **self.options})


BEST = "torch best"  # the library arm with cudnn.benchmark: cuDNN's fastest algorithm per convolution
ON_THE_MODEL = ("batch", "memory")  # kinds the analytic model answers too (a device's roofline; the peak)

# Kinds whose arms --variants chooses (the others fix their own variants), and the kind whose
# own axis is --batches (the others run each arm at every batch size given).
TAKE_VARIANTS = ("l1-bypass", "variants", "batch")


def arms(
    kind: str,
    batch: int,
    batches: tuple[int, ...] = (),
    variants: tuple[str, ...] = (),
    gpus: tuple[str, ...] = (),
    vary: tuple[tuple[str, tuple], ...] = (),
) -> list[Arm]:
    """The runs of an experiment, in the order they run: the kind's arms (``kind_arms``), for each
    combination of the network options ``vary`` sweeps ((name, values), ``nets.axis``), at each
    batch size of ``batches`` (for any kind but batch, whose own axis it is) on each GPU kind of
    ``gpus``. Each (GPU, options, batch) cell compares its arms as the kind does; the analysis
    compares the cells (tracker/analysis/experiments.py: GPU against GPU, per image across batches)."""
    if variants and kind not in TAKE_VARIANTS:
        raise TrackerError(f"--variants chooses the arms of {', '.join(TAKE_VARIANTS)}; experiment {kind} runs its own")
    sizes = (batch,) if kind == "batch" or not batches else batches
    names = [name for name, _ in vary]
    if len(set(names)) != len(names):
        raise TrackerError(f"--vary names {', '.join(sorted({n for n in names if names.count(n) > 1}))} twice")
    plan = []
    for gpu in gpus or (None,):
        for values in itertools.product(*(values for _, values in vary)):
            options = dict(zip(names, values))
            for size in sizes:
                suffix = "".join(f" {name}={value}" for name, value in options.items())
                suffix += (f" b{size}" if len(sizes) > 1 else "") + (f" @{gpu}" if gpu else "")
                plan += [
                    replace(
                        arm,
                        label=arm.label + suffix,
                        comparison=arm.comparison + suffix,
                        gpu=gpu,
                        name=arm.label,
                        options=options,
                    )
                    for arm in kind_arms(kind, size, batches if kind == "batch" else (), variants)
                ]
    return plan


def kind_arms(kind: str, batch: int, batches: tuple[int, ...] = (), variants: tuple[str, ...] = ()) -> list[Arm]:
    """The arms of one kind of experiment at one batch size. The variant names are the registry's
    (tracker/ops), the first registered ('global') the variants baseline, or the first of
    ``variants`` where given; fusion compares each absorbing variant (fused) with its fallback
    (shared: the same kernels, then a ReLU)."""
    from tracker.ops import OPS

    names = _variant_names(variants)
    if kind == "l1-bypass":  # where the cg build stages what ca copies with cp.async, ca staged beside them
        from tracker.analysis.experiments import BYPASS_ARM, CACHED_ARM, STAGED_ARM

        return [
            arm
            for name in names
            for arm in (
                Arm(name + CACHED_ARM, name, True, batch, OPS.parse_variants(name)),
                Arm(name + BYPASS_ARM, name, False, batch, OPS.parse_variants(name), l1_bypass=True),
                *(
                    [Arm(name + STAGED_ARM, name, False, batch, OPS.parse_variants(name), staged=True)]
                    if _copies_async(name)
                    else []
                ),
            )
        ]
    if kind == "fusion":
        fused = [(op.kind, v) for op in OPS for v in op.variants.values() if v.absorbs and v.fallback]
        return [
            Arm("separate", "fusion", True, batch, {op: str(v.fallback) for op, v in fused}),
            Arm("fused", "fusion", False, batch, {op: v.name for op, v in fused}),
        ]
    if kind == "variants":
        return [Arm(name, "variants", i == 0, batch, OPS.parse_variants(name)) for i, name in enumerate(names)]
    if kind == "batch":
        sizes = batches or (batch,)
        if not variants:
            return [Arm(f"batch {b}", "batch", i == 0, b) for i, b in enumerate(sizes)]
        return [
            Arm(f"{name} batch {b}", f"batch {name}", i == 0, b, OPS.parse_variants(name))
            for name in names
            for i, b in enumerate(sizes)
        ]
    if kind == "algorithms":
        conv = OPS["conv"]
        return [
            Arm(f"{algorithm} ({name})", "algorithms", name == conv.default, batch, {"conv": name})
            for algorithm, name in conv_algorithms().items()
        ]
    if kind == "library":  # ours with the tiles `tracker tune` found, as `tracker profile` runs them; cuDNN's
        # heuristic's algorithms, and the fastest cudnn.benchmark finds (the targets are against its best)
        return [
            Arm("ours", "library", True, batch),
            Arm("torch", "library", False, batch, implementation="torch"),
            Arm(BEST, "library", False, batch, implementation="torch", cudnn_benchmark=True),
        ]
    if kind == "memory":  # paper 002: each arm's predicted and measured peak (run.*_peak_bytes), ours and PyTorch's
        return [Arm("ours", "memory", True, batch), Arm("torch", "memory", False, batch, implementation="torch")]
    raise TrackerError(f"unknown experiment '{kind}'; known: {', '.join(KINDS)}")


def _variant_names(chosen: tuple[str, ...]) -> list[str]:
    """The registry's variant names, or those ``chosen`` (each checked, in the order given)."""
    from tracker.errors import unknown
    from tracker.ops import OPS

    names = OPS.variant_names()
    for name in chosen:
        if name not in names:
            raise unknown("variant", name, list(names))
    if len(set(chosen)) != len(chosen):
        raise TrackerError(f"--variants names a variant twice: {','.join(chosen)}")
    return list(chosen) or list(names)


def _copies_async(variant: str) -> bool:
    """Whether the variant's ca build copies operands with cp.async where its cg build stages them
    (kernels/common.cuh): a GEMM-shaped variant of some op."""
    from tracker.ops import OPS

    return any(
        launch.tunable for op in OPS if variant in op.variants for launch in op.variants[variant].launches.values()
    )


def conv_algorithms() -> dict[str, str]:
    """algorithm, as the analytic model names it -> the first conv variant that runs it, by the
    kernels its forward launches (tracker/kernel_names.py) and a Winograd's output tile: direct
    (global), implicit_gemm (shared), gemm, winograd_f2 (winograd), winograd_f4."""
    from tracker.kernel_names import phase_algorithm
    from tracker.ops import OPS
    from tracker.ops.winograd import modelled

    found: dict[str, str] = {}
    for name, variant in OPS["conv"].variants.items():
        algorithm = modelled(phase_algorithm(k.name for k in variant.launches["fwd"].kernels), name)
        if algorithm is not None and variant.absorbs is None:
            found.setdefault(algorithm, name)
    return found


def check(
    kind: str,
    backend: str,
    device: Device | None,
    executor: str = "local",
    gpus: tuple[str, ...] = (),
    model_device: Device | None = None,
) -> tuple[str, str]:
    """(backend, why) for the experiment, refusing what cannot answer its question. On a cluster
    (an executor but local) each arm's node chooses for its own GPU, as tracker profile does.
    ``model_device``: the device the model predicts for where ``device`` names none."""
    if gpus and executor == "local" and backend not in ("auto", "model"):
        raise TrackerError(_ONE_GPU)
    if backend == "model" or executor == "local":
        used = tuple(dict.fromkeys(arm.implementation for arm in kind_arms(kind, 1)))  # who runs its arms
        chosen, why, _ = choose_backend(backend, implementations=used)
        if not (chosen == "model" and kind in ON_THE_MODEL):  # the model predicts any arm's network as it is
            for name in used:
                implementation(name).installed(f"experiment {kind}")
    else:
        chosen, why = backend, f"{backend}: chosen on each node as tracker profile chooses"
    if chosen == "model" and kind not in ON_THE_MODEL:
        raise TrackerError(
            f"experiment {kind} needs a GPU backend (events or ncu): the analytic model does not "
            f"depend on kernel variants, the L1 policy or who runs the kernels, and here {why}"
        )
    if chosen == "model" and gpus:
        if device is not None:
            raise TrackerError("--device and --gpus both name the device to predict for: give one")
        for gpu in gpus:
            lookup(gpu)  # on the model backend a GPU kind is the catalog device predicted for
    elif chosen == "model" and device is None and model_device is None and kind == "batch":
        raise TrackerError(
            "experiment batch on the model backend needs --device NAME (or --gpus NAME,...) for the roofline's times"
        )
    elif gpus and executor == "local":
        raise TrackerError(_ONE_GPU)
    return chosen, why


_ONE_GPU = (
    "--gpus on a GPU backend needs a cluster to place each arm on its GPU kind (--executor slurm); "
    "this machine runs the arms on its own GPU"
)


def _runnable(plan: list[Arm], net: Network, echo: Callable[[str], None]) -> list[Arm]:
    """The memory study's arms less those whose implementation cannot run the network (ours,
    unet2d's separable convolutions: grouped): PyTorch's peak is still an answer, and an arm bound
    to fail is none."""
    kept = []
    for arm in plan:
        network = arm.network(net)  # an option the network does not take is an error, not an arm left out
        try:
            implementation(arm.implementation).check_network(network)
        except TrackerError as exc:
            echo(f"{arm.label}: left out: {exc}")
            continue
        kept.append(arm)
    return kept


def workload(net: Network, arm: Arm, repeat: int, warmup: int) -> Workload:
    """What an arm runs on the experiment's network ``net`` (checked: a bad value is refused here)."""
    made = Workload.of(
        arm.network(net),
        arm.batch,
        variants=arm.variants,
        l1_bypass=arm.l1_bypass,
        staged=arm.staged,
        repeat=repeat,
        warmup=warmup,
        implementation=arm.implementation,
        cudnn_benchmark=arm.cudnn_benchmark,
    )
    checked(made)
    return made


def run_experiment(
    db: str | None,
    kind: str,
    net: Network,
    batch: int,
    *,
    batches: tuple[int, ...] = (),
    variants: tuple[str, ...] = (),
    gpus: tuple[str, ...] = (),
    vary: tuple[tuple[str, tuple], ...] = (),
    backend: str = "auto",
    repeat: int = 5,
    warmup: int = 1,
    device: Device | None = None,
    echo: Callable[[str], None] = lambda line: None,
    ncu: NcuSettings = NcuSettings(),
    executor: Executor | None = None,
    fresh: bool = False,
    model_device: Device | None = None,
    started: datetime | None = None,
) -> int:
    """Plan every arm of ``kind`` (on each of ``gpus``, at each of ``batches``), record them in an
    experiment row, and have ``executor`` (default: this process, one arm after another) run them
    into ``db``; its id. An unfinished experiment planned the same way is resumed unless ``fresh``:
    its complete arms are kept, the others run again; one that a live process on this host is
    running is refused in one line, and so is one that the same command, started with this one at
    ``started`` (default now), has completed: identical commands started together make one
    experiment. ``model_device``: the device a model experiment predicts for where neither
    ``device`` nor ``gpus`` names one (the CLI's catalog default, as tracker profile's)."""
    from tracker.executors import Local, Sweep
    from tracker.store import open_store
    from tracker.store.experiments import recording_experiment
    from tracker.store.queries import arm_rows

    runner: Executor = executor or Local()
    plan = arms(kind, batch, batches, variants, gpus, vary)
    if kind == "memory":
        plan = _runnable(plan, net, echo)
    chosen, why = check(kind, backend, device, runner.name, gpus, None if gpus else model_device)
    check_options(32, Options(ncu))
    for arm in plan:
        workload(net, arm, repeat, warmup)  # every arm checked before the experiment's row
    runner.check(db, net, chosen)
    echo(f"experiment {kind}: {len(plan)} runs of {net.name} on backend {chosen} ({why}), executor {runner.name}")
    if not gpus:
        device = predicted_for(chosen, device, model_device, echo)
    store = open_store(db, write=True)
    settings = dict(
        batch=batch,
        batches=list(batches),
        variants=list(variants),
        gpus=list(gpus),
        vary={name: list(values) for name, values in vary},
        backend=chosen,
        repeat=repeat,
        warmup=warmup,
        device=device.name if device else None,
        ncu_cache_control=ncu.cache_control,
        ncu_clock_control=ncu.clock_control,
        executor=runner.name,
    )

    def resuming(resume: int) -> None:
        runner.reconcile(store, resume, echo)
        kept = sum(a.state == "complete" for a in arm_rows(store, resume))
        echo(
            f"resuming experiment e{resume}: {kept} of {len(plan)} arms complete (kept); the rest run "
            "(--fresh starts a new experiment)"
        )

    with recording_experiment(
        store,
        [arm.row() for arm in plan],
        runner.name,
        resume=not fresh,
        reconcile=resuming,
        since=started,
        kind=kind,
        network=net.name,
        network_options=net.options,
        settings=settings,
    ) as experiment_id:
        echo(f"experiment e{experiment_id} in {store.where}")
        runner.run(Sweep(db, store, experiment_id, net, backend, echo, run_arm))
    store.dispose()
    return experiment_id


def run_arm(
    db: str | None,
    experiment_id: int,
    position: int,
    *,
    echo: Callable[[str], None] = lambda line: None,
    net: Network | None = None,
    backend: str | None = None,
) -> Profile:
    """Run one queued arm of an experiment into ``db`` as its row plans it (``net`` and ``backend``:
    what the planning process already holds, else rebuilt from the experiment's row) and record
    how it ended: complete with its run (in the run's own last transaction), failed or interrupted
    with the reason and its output's last lines. ``ArmTaken`` if another process claimed it
    first. The process that ends the experiment's last arm settles the experiment."""
    from tracker.nets import build
    from tracker.signals import held, interruptible
    from tracker.store import find_experiment, open_store
    from tracker.store.experiments import LOG_LINES, complete_arm, end_arm, link_arm, settle, start_arm
    from tracker.store.queries import find_arm
    from tracker.store.runs import ended_by

    store = open_store(db, write=True)
    experiment, row = find_experiment(store, experiment_id), find_arm(store, experiment_id, position)
    arm, settings = Arm.of(row), experiment.settings
    net = net or build(experiment.network, **experiment.network_options)
    chosen = backend or settings["backend"]
    predicted_for = arm.gpu if chosen == "model" and arm.gpu else settings["device"]
    device = lookup(predicted_for) if predicted_for else None
    work = workload(net, arm, settings["repeat"], settings["warmup"])
    options = Options(
        NcuSettings(cache_control=settings["ncu_cache_control"], clock_control=settings["ncu_clock_control"])
    )
    lines: deque[str] = deque(maxlen=LOG_LINES)

    def say(line: str) -> None:
        lines.append(line)
        echo(line)

    claimed = False
    with interruptible():
        try:
            with held():  # a signal just after the claim is raised here, in the try that marks the arm
                claimed = start_arm(store, experiment_id, position)
            if not claimed:
                raise ArmTaken(
                    f"arm {position} ({arm.label}) of experiment e{experiment_id} is "
                    f"{find_arm(store, experiment_id, position).state}, not queued: nothing to run"
                )
            result = profile_workload(
                db,
                work,
                backend=chosen,
                device=device,
                options=options,
                echo=say,
                arm=ArmHooks(
                    link=lambda session, run_id: link_arm(session, experiment_id, position, run_id),
                    done=lambda session, run_id: complete_arm(
                        session, experiment_id, position, run_id, "\n".join(lines)
                    ),
                ),
            )
        except BaseException as exc:
            if claimed:  # an arm that completed with its run keeps complete (end_arm ends only a running one)
                ended, why = ended_by(exc)
                with held():
                    end_arm(store, experiment_id, position, ended, why, "\n".join([*lines, why]), only_if=("running",))
                    settle(store, experiment_id)
            raise
        with held():
            settle(store, experiment_id)
    store.dispose()
    return result


@dataclass(frozen=True)
class Outcome:
    """An experiment as ``tracker experiment`` prints it once its arms have run: its status in
    words, why it did not complete (``error``), its arms' table (``results``) and each sweep's
    comparison along an axis it swept."""

    status: str
    error: str | None
    frame: pd.DataFrame
    sweeps: list[tuple[str, pd.DataFrame]]

    @property
    def complete(self) -> bool:
        return self.status.startswith("complete")


def outcome(store: Store, experiment_id: int, kind: str) -> Outcome:
    """What experiment ``experiment_id`` of ``kind`` found: a memory study whose arms that did not
    complete all ran out of memory is complete, that being its answer."""
    from tracker.analysis.experiments import across, results
    from tracker.store import experiment_dict, find_experiment

    found = find_experiment(store, experiment_id)
    status = experiment_dict(found)["status"]
    frame = results(store, experiment_id, kind)
    if kind == "memory" and status == "failed" and _only_out_of_memory(frame):
        status = f"complete, {int((frame['state'] == 'failed').sum())} arms out of memory"
    sweeps = [(axis, across(store, experiment_id, axis)) for axis in ("gpu", "batch") if kind not in (axis, "memory")]
    return Outcome(status, found.error, frame, [(axis, table) for axis, table in sweeps if not table.empty])


def _only_out_of_memory(frame: pd.DataFrame) -> bool:
    """Every arm that did not complete ran out of memory: the study's answer, not a failure."""
    failed = frame[frame["state"] != "complete"]
    return not failed.empty and failed["reason"].fillna("").str.startswith("OutOfMemory").all()
