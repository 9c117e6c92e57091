"""``tracker profile``: choose a backend, run it, store the run.

Backends (DESIGN.md): ``ncu`` (CUDA device and usable Nsight Compute), ``events`` (CUDA device,
CUDA-event times only), ``model`` (no GPU: analytic predictions, labelled as such). Every backend
stores the model's predictions so that each measured figure sits beside its prediction.
This build has ``model`` and ``events``; ``ncu`` arrives with the Nsight Compute wrapper.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Callable

from tracker.errors import BackendUnavailable, UnknownName
from tracker.model import Device, Memory, Prediction, lookup, memory, predict
from tracker.nets import Network

BACKENDS = ("auto", "ncu", "events", "model")


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
    """(backend, why) for ``--backend requested``; a backend that cannot run here is an error."""
    if requested == "model":
        return "model", "asked for with --backend model"
    if requested in ("ncu", "events"):
        try:
            why = require_gpu(f"--backend {requested}")
        except BackendUnavailable as exc:
            raise BackendUnavailable(f"{exc}; use --backend model") from None
        if requested == "ncu":
            raise BackendUnavailable("the ncu backend is not built yet in this version of tracker; "
                                     "use --backend events")
        return "events", f"asked for with --backend events ({why})"
    try:
        why = require_gpu("a GPU backend")
    except BackendUnavailable as exc:
        return "model", str(exc).replace("a GPU backend needs", "the GPU backends need")
    return "events", f"{why} found; the ncu backend is not built yet in this version"


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
    echo: Callable[[str], None] = lambda line: None,
) -> Profile:
    """Profile ``net`` at ``batch`` into the trace database ``db`` and return what was stored."""
    from tracker.store import open_store, recording

    chosen, reason = choose_backend(backend)  # before the database: a refusal creates no file
    echo(f"backend: {chosen} ({reason})")
    store = open_store(db, write=True)
    measured = None
    if chosen == "events":
        from tracker.gpu.runner import profile_events

        measured = profile_events(net, batch, variants or {}, phases, l1_bypass, repeat, warmup, echo)
        device = device or _catalog_device(measured.device["device_name"])
    predictions = predict(net, batch, device, dtype_bits, phases)
    peak = memory(net, batch, dtype_bits)
    fields = dict(
        network=net.name, network_options=net.options, batch=batch, phases=phases, dtype_bits=dtype_bits,
        variants=variants or {}, l1_bypass=l1_bypass, backend=chosen, backend_reason=reason,
        repeat=repeat if measured else 0, predicted_peak_bytes=peak.peak_bytes,
    )
    if measured:
        fields.update(measured.device, measured_peak_bytes=measured.peak_bytes)
    elif device is not None:
        fields.update(device_name=device.name, compute_capability=device.compute_capability,
                      sm_count=device.sm_count)
    with recording(store, **fields) as run:
        echo(f"run {run.run_id}: storing {len(net.layers)} layers and {len(predictions)} layer-phase predictions")
        run.add_layers(net, predictions)
        if measured:
            echo(f"run {run.run_id}: storing {len(measured.launches)} launches")
            run.add_launches(measured.launches)
    store.dispose()
    return Profile(run.run_id, store.where, chosen, reason, predictions, peak)


def _catalog_device(cuda_name: str) -> Device | None:
    """The catalog entry of the GPU measured, for the roofline beside the measurement."""
    try:
        return lookup(cuda_name)
    except UnknownName:
        return None
