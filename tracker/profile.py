"""``tracker profile``: choose a backend, run it, store the run.

Backends (``choose_backend`` picks one and says why): ``ncu`` (CUDA device and usable Nsight
Compute), ``events`` (CUDA device, CUDA-event times only), ``model`` (no GPU: analytic
predictions, labelled as such). Every backend
stores the model's predictions so that each measured figure sits beside its prediction.
``ncu`` runs the events pass first (launch log and times), then the same workload in a child
process under Nsight Compute, and joins the counters onto the launch log (tracker/profilers).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Callable

from tracker.errors import BackendUnavailable, TrackerError, UnknownName, unknown
from tracker.gpu.workload import Workload
from tracker.model import Device, Memory, Prediction, lookup, memory, predict
from tracker.model.roofline import check_batch, check_dtype_bits, check_phases
from tracker.nets import Network
from tracker.profilers.ncu import Settings as NcuSettings

BACKENDS = ("auto", "ncu", "events", "model")  # --backend reads these
MAX_REPEAT = 1000  # --repeat and --warmup read these
MAX_WARMUP = 100


@dataclass(frozen=True)
class Profile:
    run_id: int
    db: str  # where it was stored, for messages
    backend: str
    reason: str
    predictions: list[Prediction]
    memory: Memory


def require_gpu(what: str) -> str:
    """Raise unless this machine has a CUDA device and CuPy; return how we know the device."""
    from tracker.gpu.detect import cuda_devices

    count, why = cuda_devices()
    if not count:
        raise BackendUnavailable(f"{what} needs an NVIDIA GPU, and this machine has none ({why})")
    if importlib.util.find_spec("cupy") is None:
        raise BackendUnavailable(f"{what} needs CuPy: pip install -e '.[gpu]'")
    return why


def choose_backend(requested: str) -> tuple[str, str]:
    """(backend, why) for ``--backend requested``; a backend that cannot run here is an error.
    ``auto`` picks ncu where a GPU, CuPy and ncu are found; a run that then finds the counters
    restricted falls back to events (``profile``)."""
    if requested not in BACKENDS:
        raise unknown("backend", str(requested), list(BACKENDS))
    if requested == "model":
        return "model", "asked for with --backend model"
    if requested in ("ncu", "events"):
        try:
            why = require_gpu(f"--backend {requested}")
            if requested == "ncu":
                ncu, version = _ncu()
                why += f"; ncu {version} at {ncu}"
        except BackendUnavailable as exc:
            raise BackendUnavailable(f"{exc}; use --backend {'events' if requested == 'ncu' else 'model'}") from None
        return requested, f"asked for with --backend {requested} ({why})"
    try:
        why = require_gpu("a GPU backend")
    except BackendUnavailable as exc:
        return "model", str(exc).replace("a GPU backend needs", "the GPU backends need")
    try:
        ncu, version = _ncu()
    except BackendUnavailable as exc:
        return "events", f"{why} found; {exc}"
    return "ncu", f"{why} found, ncu {version} at {ncu}"


def _ncu() -> tuple[str, str]:
    from tracker.profilers.collect import usable_ncu

    return usable_ncu()


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
) -> Profile:
    """Profile ``net`` at ``batch`` into the trace database ``db`` and return what was stored.

    The run's row is written first (status running), then the passes run and their results are
    written, each in one transaction; a failure or interruption marks the run and keeps nothing
    half-written. GEMM-shaped launches run the fastest verified tile `tracker tune` stored for
    this GPU and shape, unless ``untuned``."""
    from tracker.store import open_store, recording

    check_arguments(batch, phases, variants or {}, dtype_bits, repeat, warmup, ncu)
    chosen, reason = choose_backend(backend)  # before the database: a refusal creates no file
    echo(f"backend: {chosen} ({reason})")
    if chosen != "model":
        from tracker.gpu.network import check_indexing

        check_indexing(net, batch)  # before the database too
    store = open_store(db, write=True)
    peak = memory(net, batch, dtype_bits)
    fields = dict(
        network=net.name, network_options=net.options, batch=batch, phases=phases, dtype_bits=dtype_bits,
        variants=variants or {}, l1_bypass=l1_bypass, backend=chosen, backend_reason=reason,
        repeat=repeat if chosen != "model" else 0, predicted_peak_bytes=peak.peak_bytes,
    )
    if chosen == "model" and device is not None:
        fields.update(device_name=device.name, compute_capability=device.compute_capability,
                      sm_count=device.sm_count)
    with recording(store, link=link, **fields) as run:  # link: an experiment's, in the run's own transaction
        echo(f"run {run.run_id} in {store.where}")
        if chosen == "model":
            predictions = predict(net, batch, device, dtype_bits, phases)
            run.add_layers(net, predictions)
        else:
            tiles = {} if untuned else _tuned(store, net, batch, variants or {}, echo)
            run.update(tiles=tiles)  # what ran is part of the run: a tuned profile is not an untuned one
            workload = Workload(net.name, net.options, batch, variants or {}, phases, l1_bypass, repeat, warmup, tiles)
            chosen, reason, predictions = _measure(run, chosen, reason, backend == "auto", net, workload, device,
                                                   dtype_bits, ncu_report, ncu, echo)
    store.dispose()
    return Profile(run.run_id, store.where, chosen, reason, predictions, peak)


def check_arguments(batch: int, phases: str, variants: dict[str, str], dtype_bits: int, repeat: int, warmup: int,
                    ncu: NcuSettings) -> None:
    """profile()'s arguments, checked as the CLI checks its options, before anything is written
    (a model run records its variants: an unknown one must not be stored; an experiment checks
    every arm's before it creates its row)."""
    from tracker.ops import OPS

    check_batch(batch)
    check_phases(phases)
    check_dtype_bits(dtype_bits)
    OPS.check_chosen(variants)
    if not 1 <= repeat <= MAX_REPEAT:
        raise TrackerError(f"repeat {repeat} is out of range 1..{MAX_REPEAT}")
    if not 0 <= warmup <= MAX_WARMUP:
        raise TrackerError(f"warmup {warmup} is out of range 0..{MAX_WARMUP}")
    if not isinstance(ncu, NcuSettings):
        raise TrackerError(f"ncu must be tracker.profilers.ncu.Settings, not {type(ncu).__name__}")


def _measure(run, backend: str, reason: str, may_fall_back: bool, net: Network, w: Workload, device: Device | None,
             dtype_bits: int, ncu_report: str | None, ncu: NcuSettings,
             echo: Callable[[str], None]) -> tuple[str, str, list[Prediction]]:
    """Pass 1 (events), then pass 2 (ncu) if asked for; store both. Returns (backend, reason, predictions).
    ``may_fall_back``: the backend was chosen (--backend auto), so restricted counters fall back to events."""
    from tracker.gpu.runner import profile_events

    measured = profile_events(net, w.batch, w.variants, w.phases, w.l1_bypass, w.repeat, w.warmup, echo, w.tiles)
    device = device or _catalog_device(measured.device["device_name"])
    predictions = predict(net, w.batch, device, dtype_bits, w.phases)
    counters = None
    if backend == "ncu":
        counters, backend, reason = _pass2(net, w, measured, reason, may_fall_back, ncu_report, ncu, echo)
    run.update(**measured.device, measured_peak_bytes=measured.peak_bytes, backend=backend, backend_reason=reason,
               **(counters.run_fields if counters else {}))
    echo(f"storing {len(net.layers)} layers, {len(predictions)} predictions, {len(measured.launches)} launches")
    run.add_layers(net, predictions)
    if counters:
        echo(f"storing {len(counters.rows)} counter values")
    run.add_launches(measured.launches, counters.rows if counters else [])
    return backend, reason, predictions


def _pass2(net: Network, workload: Workload, measured, reason: str, may_fall_back: bool, ncu_report: str | None,
           settings: NcuSettings, echo):
    """(Counters or None, backend, reason): ncu's counters; under --backend auto a GPU whose counters
    are restricted falls back to events, saying why."""
    from tracker.profilers.collect import collect

    names = {layer.id: layer.name for layer in net.layers}
    launches = [dict(row, range=f"{names[row['layer_id']]}/{row['phase']}") for row in measured.launches]
    cc = float(measured.device["compute_capability"])
    try:
        counters = collect(workload, launches, cc, settings, echo, keep_report=ncu_report)
    except BackendUnavailable as exc:
        if may_fall_back:
            echo(f"falling back to events: {exc}")
            return None, "events", f"{reason}; but {exc}"
        raise
    return counters, "ncu", f"{reason}; {counters.note}" if counters.note else reason


def _tuned(store, net: Network, batch: int, variants: dict[str, str], echo: Callable[[str], None]) -> dict[str, str]:
    """The tiles `tracker tune` found fastest on this GPU for this network's layer phases."""
    from tracker.gpu.detect import device_name
    from tracker.tune import best

    name = device_name()
    tiles = best(store, name, net, batch, variants) if name else {}
    if tiles:
        echo(f"tuned GEMM tiles for {name} ({len(tiles)} layer phases; --untuned runs the defaults): "
             + ", ".join(f"{key} {tile}" for key, tile in tiles.items()))
    return tiles


def _catalog_device(cuda_name: str) -> Device | None:
    """The catalog entry of the GPU measured, for the roofline beside the measurement."""
    try:
        return lookup(cuda_name)
    except UnknownName:
        return None
