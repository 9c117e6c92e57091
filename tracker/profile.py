"""``tracker profile``: choose a backend, run it, store the run.

Backends (``choose_backend`` picks one and says why): a counter collector (``ncu`` on Volta and
newer, ``nvprof`` on older GPUs: tracker/profilers), ``events`` (CUDA device, CUDA-event times
only), ``model`` (no GPU: analytic predictions, labelled as such). Every backend stores the
model's predictions so that each measured figure sits beside its prediction.

A GPU profile is one ``Workload`` (tracker/gpu/workload.py), checked and planned once by the
implementation that runs it (tracker/implementations: our kernels, or PyTorch's libraries): pass 1
runs it for the launch log and times, which are stored at once; then the collector runs the
same workload's first measured iterations (``--counter-iterations``, one by default) in a child
process under its profiler and joins the counters onto pass 1's launches of those iterations
(tracker/profilers). A pass 2 that fails or is interrupted leaves pass 1 stored and the run
marked, with no counters. Both implementations go through the same backends, collectors, join
and store; nothing here asks which one runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from tracker.errors import BackendUnavailable, TrackerError, UnknownName, unknown
from tracker.gpu.detect import require_gpu
from tracker.gpu.workload import MAX_REPEAT, MAX_WARMUP, Workload
from tracker.implementations import checked, implementation
from tracker.implementations.child import ProfiledWorkload
from tracker.model import Device, Memory, Prediction, lookup, memory, predict
from tracker.model.roofline import check_dtype_bits
from tracker.nets import Network
from tracker.profilers import COLLECTORS, Collector, Options, counted, iterations_profiled
from tracker.profilers.ncu import Settings as NcuSettings

BACKENDS = ("auto", *COLLECTORS, "events", "model")  # --backend reads these
__all__ = [
    "BACKENDS",
    "MAX_REPEAT",
    "MAX_WARMUP",
    "ArmHooks",
    "Choice",
    "Profile",
    "choose_backend",
    "profile",
    "profile_workload",
    "require_gpu",
]


@dataclass(frozen=True)
class ArmHooks:
    """What an experiment's arm writes in the transactions that create its run (``link``) and
    complete it (``done``); each takes the session and the run's id. None outside an experiment."""

    link: Callable | None = None
    done: Callable | None = None


@dataclass(frozen=True)
class Profile:
    """What a profile stored, and of what."""

    run_id: int
    db: str  # where it was stored, for messages
    backend: str
    reason: str
    predictions: list[Prediction]
    memory: Memory
    device: Device | None = None  # the device the predictions are for, if any
    workload: Workload | None = None  # what ran (planned, on a GPU backend)
    counter_iterations: int | None = None  # the measured iterations pass 2 profiled, if it ran

    @property
    def ops(self) -> float:
        return sum(p.ops for p in self.predictions)

    @property
    def bytes(self) -> float:
        """The compulsory traffic of every layer phase."""
        return sum(p.bytes for p in self.predictions)

    def summary(self) -> dict:
        """The run in one row (`tracker profile --format json|csv`)."""
        assert self.workload is not None
        return {
            "run_id": self.run_id,
            "db": self.db,
            "backend": self.backend,
            "reason": self.reason,
            "network": self.workload.network,
            "implementation": self.workload.implementation,
            "batch": self.workload.batch,
            "layers": len(self.workload.net.layers),
            "predictions": len(self.predictions),
            "ops": self.ops,
            "bytes": self.bytes,
            "predicted_ms": sum(p.predicted_ms or 0.0 for p in self.predictions) if self.device else None,
            "predicted_peak_bytes": self.memory.peak_bytes,
            "measured": self.backend != "model",
            "counter_iterations": self.counter_iterations,
        }


class Choice(NamedTuple):
    """The backend a profile runs on, why, and (for ncu and nvprof) the collector found."""

    backend: str
    reason: str
    collector: Collector | None = None


def choose_backend(requested: str, options: Options = Options(), implementations: tuple[str, ...] = ()) -> Choice:
    """The backend for ``--backend requested``; one that cannot run here is an error. ``auto``
    picks the collector for this GPU's compute capability (ncu, or nvprof before Volta) where a
    GPU, CuPy and the collector are found (and what each of ``implementations`` needs on the GPU:
    a CUDA build of PyTorch for torch), else events, else model; a run that then finds the
    counters restricted falls back to events (``profile``)."""
    if requested not in BACKENDS:
        raise unknown("backend", str(requested), list(BACKENDS))
    if requested == "model":
        return Choice("model", "asked for with --backend model")
    if requested != "auto":
        return _named(requested, options, implementations)
    try:
        why = _require_gpu("a GPU backend", implementations)
    except BackendUnavailable as exc:
        return Choice("model", str(exc).replace("a GPU backend needs", "the GPU backends need"))
    from tracker import profilers
    from tracker.gpu.detect import compute_capability

    cc = compute_capability()
    name = profilers.for_device(cc)
    if name != next(iter(COLLECTORS)):
        why += f" of compute capability {cc}, which Nsight Compute does not support"
    try:
        collector = profilers.find(name, options)
    except BackendUnavailable as exc:
        return Choice("events", f"{why} found; {exc}")
    return Choice(name, f"{why} found, {collector.describe()}", collector)


def _require_gpu(what: str, implementations: tuple[str, ...]) -> str:
    """require_gpu, and what each implementation needs to run on it."""
    why = require_gpu(what)
    return why + "".join(implementation(name).on_gpu(what) for name in implementations)


INSTEAD = {"cupti": "ncu"}  # what to use where a collector asked for by name is missing (else events)


def _named(requested: str, options: Options, implementations: tuple[str, ...]) -> Choice:
    """--backend events, ncu, nvprof or cupti: asked for by name, so what is missing is an error
    that says what runs instead: the model without a GPU, another backend without the tool."""
    from tracker import profilers
    from tracker.gpu.detect import compute_capability

    try:
        why = _require_gpu(f"--backend {requested}", implementations)
    except BackendUnavailable as exc:
        raise BackendUnavailable(f"{exc}; use --backend model (no GPU needed)") from None
    if requested not in COLLECTORS:
        return Choice(requested, f"asked for with --backend {requested} ({why})")
    cc = compute_capability()
    if cc is not None and not profilers.supports(requested, cc):
        raise BackendUnavailable(
            f"{requested} does not profile compute capability {cc}: use --backend {profilers.for_device(cc)}"
        )
    try:
        collector = profilers.find(requested, options)
    except BackendUnavailable as exc:
        raise BackendUnavailable(f"{exc}; use --backend {INSTEAD.get(requested, 'events')}") from None
    return Choice(requested, f"asked for with --backend {requested} ({why}; {collector.describe()})", collector)


def profile(
    db: str | None,
    net: Network,
    batch: int,
    *,
    backend: str = "auto",
    phases: str = "both",
    variants: dict[str, str] | None = None,
    l1_bypass: bool = False,
    device: Device | None = None,
    dtype_bits: int = 32,
    repeat: int = 5,
    warmup: int = 1,
    ncu_report: str | None = None,
    echo: Callable[[str], None] = lambda line: None,
    ncu: NcuSettings = NcuSettings(),
    link: Callable | None = None,
    untuned: bool = False,
    counter_iterations: int = 1,
) -> Profile:
    """Profile ``net`` at ``batch`` into the trace database ``db`` and return what was stored: the
    library's spelling of ``profile_workload`` (the CLI makes its Workload itself).
    ``counter_iterations``: how many of the ``repeat`` measured iterations pass 2 profiles."""
    workload = Workload.of(
        net, batch, variants=variants or {}, phases=phases, l1_bypass=l1_bypass, repeat=repeat, warmup=warmup
    )
    return profile_workload(
        db,
        workload,
        backend=backend,
        device=device,
        dtype_bits=dtype_bits,
        options=Options(ncu, ncu_report, counter_iterations),
        echo=echo,
        arm=ArmHooks(link=link),
        untuned=untuned,
    )


def profile_workload(
    db: str | None,
    workload: Workload,
    *,
    backend: str = "auto",
    device: Device | None = None,
    dtype_bits: int = 32,
    options: Options = Options(),
    echo: Callable[[str], None] = lambda line: None,
    arm: ArmHooks = ArmHooks(),
    untuned: bool = False,
    model_device: Device | None = None,
) -> Profile:
    """Profile ``workload`` into the trace database ``db`` and return what was stored.

    The run's row is written first (status running), then the passes run and each one's results
    are written as it ends, in one transaction; a failure or interruption marks the run and keeps
    nothing half-written (pass 1's launches and times stay when pass 2 does not finish).
    GEMM-shaped launches run the fastest verified tile `tracker tune` stored for this GPU and
    shape, unless ``untuned``. ``arm``: what an experiment's arm writes with the run.
    ``options``: the collector's settings, where to keep its report, and how many measured
    iterations it profiles. ``model_device``: the device a model run
    predicts for where ``device`` names none (the CLI's catalog default), said through ``echo``."""
    from tracker.gpu.network import algorithms
    from tracker.store import open_store, recording

    runs = checked(workload)  # everything is checked before the database: a refusal creates no file
    check_options(dtype_bits, options, workload.repeat)
    net, batch = workload.net, workload.batch
    choice = choose_backend(backend, options, (runs.name,))
    library = runs.recorded(workload, choice.backend)
    echo(f"backend: {choice.backend} ({choice.reason})")
    device = predicted_for(choice.backend, device, model_device, echo)
    if choice.backend != "model":
        runs.check_network(net, batch)
    store = open_store(db, write=True)
    planned = runs.planned(workload, untuned) if choice.backend == "model" else None  # a GPU run plans below
    named = algorithms(net, planned, batch)
    peak = memory(net, batch, dtype_bits, named)
    fields = dict(
        network=net.name,
        network_options=net.options,
        batch=batch,
        phases=workload.phases,
        dtype_bits=dtype_bits,
        variants=workload.variants,
        l1_bypass=workload.l1_bypass,
        loaders=runs.loaders(workload),
        implementation=workload.implementation,
        library=library,
        backend=choice.backend,
        backend_reason=choice.reason,
        repeat=workload.repeat if choice.backend != "model" else 0,
        predicted_peak_bytes=peak.peak_bytes,
        plan=planned,
    )
    if choice.backend == "model" and device is not None:
        fields.update(device_name=device.name, compute_capability=device.compute_capability, sm_count=device.sm_count)
    with recording(store, link=arm.link, done=arm.done, **fields) as run:
        echo(f"run {run.run_id} in {store.where}")
        if choice.backend == "model":
            predictions = predict(net, batch, device, dtype_bits, workload.phases, named)
            run.add_layers(net, predictions)
        else:
            workload = runs.plan(store, workload, untuned, echo)
            planned = runs.planned(workload, untuned)
            named = algorithms(net, planned, batch)
            peak = memory(net, batch, dtype_bits, named)
            # what ran is part of the run: a tuned profile is not an untuned one
            run.update(
                tiles=workload.tiles,
                tuned_variants=workload.tuned_variants,
                plan=planned,
                predicted_peak_bytes=peak.peak_bytes,
            )
            choice, predictions = _measure(
                run, choice, backend == "auto", workload, device, dtype_bits, named, options.iterations, echo
            )
    store.dispose()
    profiled = options.iterations if choice.backend in COLLECTORS else None
    return Profile(
        run.run_id, store.where, choice.backend, choice.reason, predictions, peak, device, workload, profiled
    )


def predicted_for(
    backend: str, device: Device | None, default: Device | None, echo: Callable[[str], None]
) -> Device | None:
    """The device a run on ``backend`` is predicted for: ``device`` where one is named; on the
    model backend, where none is, ``default`` (the CLI's: the catalog's MODEL_DEFAULT), said in
    the one line tracker profile and tracker experiment both print. On a GPU backend None stays
    None: the run is predicted for the GPU it measures."""
    if backend != "model" or device is not None or default is None:
        return device
    echo(f"device: {default.name}, from the catalog (--device NAME predicts for another; `tracker devices` lists them)")
    return default


def check_options(dtype_bits: int, options: Options, repeat: int | None = None) -> None:
    """What a profile takes beside its Workload (which checks itself), checked as the CLI checks
    its options, before anything is written: pass 2 profiles measured iterations of pass 1, so no
    more than its ``repeat``, where that is known."""
    check_dtype_bits(dtype_bits)
    if not isinstance(options, Options):
        raise TrackerError(f"options must be tracker.profilers.Options, not {type(options).__name__}")
    if not isinstance(options.ncu, NcuSettings):
        raise TrackerError(f"ncu must be tracker.profilers.ncu.Settings, not {type(options.ncu).__name__}")
    if repeat is not None and options.iterations > repeat:
        raise TrackerError(
            f"--counter-iterations {options.iterations} exceeds --repeat {repeat}: pass 2 collects "
            "counters from measured iterations of pass 1"
        )


def _measure(
    run,
    choice: Choice,
    may_fall_back: bool,
    workload: Workload,
    device: Device | None,
    dtype_bits: int,
    named: dict[str, str] | None,
    iterations: int,
    echo: Callable[[str], None],
) -> tuple[Choice, list[Prediction]]:
    """Pass 1 (events), stored as soon as it ends, then pass 2 (the collector) if there is one,
    profiling the first ``iterations`` measured iterations, its counters stored onto pass 1's
    launches. Pass 2 takes minutes where pass 1 takes seconds: a pass 2 that fails or is
    interrupted must not take pass 1's times with it. Returns what ran and the predictions.
    ``may_fall_back``: the backend was chosen (--backend auto), so restricted counters fall back
    to events. ``named``: the algorithm the model predicts each planned conv phase by."""
    net = workload.net
    measured = implementation(workload.implementation).pass1(workload, echo)
    device = device or _catalog_device(measured.device["device_name"])
    predictions = predict(net, workload.batch, device, dtype_bits, workload.phases, named)
    rows = _store_pass1(run, net, predictions, measured, echo)
    if choice.collector is None:
        return choice, predictions
    counters, choice = _pass2(choice, workload, measured, may_fall_back, iterations, echo)
    run.update(backend=choice.backend, backend_reason=choice.reason)
    if counters:
        echo(f"storing {len(counters.rows)} counter values")
        run.add_counters(rows, counters.rows, counters.sources, **counters.run_fields)
    return choice, predictions


def _store_pass1(run, net: Network, predictions: list[Prediction], measured, echo: Callable[[str], None]) -> list[dict]:
    """The device, layers, predictions and pass 1's launches with their times; the launch rows."""
    run.update(**measured.device, measured_peak_bytes=measured.peak_bytes)
    rows = [launch.row() for launch in measured.launches]
    echo(f"storing {len(net.layers)} layers, {len(predictions)} predictions, {len(rows)} launches")
    run.add_layers(net, predictions)
    run.add_launches(rows)
    return rows


def _pass2(choice: Choice, workload: Workload, measured, may_fall_back: bool, iterations: int, echo):
    """(Counters or None, what ran): the collector's counters from the first ``iterations``
    measured iterations; under --backend auto a GPU whose counters are restricted falls back to
    events, saying why."""
    assert choice.collector is not None
    cc = float(measured.device["compute_capability"])
    profiled, launches = counted(workload, measured.launches, iterations)
    echo(
        f"pass 2 profiles {iterations_profiled(iterations, workload.repeat)} ({len(launches)} launches; "
        "--counter-iterations N sets how many)"
    )
    try:
        target = ProfiledWorkload(profiled, implementation(workload.implementation))
        counters = choice.collector.collect(target, launches, cc, echo)
    except BackendUnavailable as exc:
        if may_fall_back:
            echo(f"falling back to events: {exc}")
            return None, Choice("events", f"{choice.reason}; but {exc}")
        raise
    return counters, choice._replace(reason=f"{choice.reason}; {counters.note}" if counters.note else choice.reason)


def _catalog_device(cuda_name: str) -> Device | None:
    """The catalog entry of the GPU measured, for the roofline beside the measurement."""
    try:
        return lookup(cuda_name)
    except UnknownName:
        return None
