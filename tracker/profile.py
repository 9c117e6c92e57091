"""``tracker profile``: choose a backend, run it, store the run.

Backends (DESIGN.md): ``ncu`` (CUDA device and usable Nsight Compute), ``events`` (CUDA device,
CUDA-event times only), ``model`` (no GPU: analytic predictions, labelled as such). Every backend
stores the model's predictions so that each measured figure sits beside its prediction.
This build has the ``model`` backend; ``events`` and ``ncu`` arrive with the GPU runner and the
Nsight Compute wrapper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tracker.errors import BackendUnavailable
from tracker.model import Device, Memory, Prediction, memory, predict
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


def choose_backend(requested: str) -> tuple[str, str]:
    """(backend, why) for ``--backend requested``; a backend that cannot run here is an error."""
    if requested == "model":
        return "model", "asked for with --backend model"
    from tracker.gpu.detect import cuda_devices

    count, why = cuda_devices()
    if requested in ("ncu", "events"):
        if not count:
            raise BackendUnavailable(f"--backend {requested} needs an NVIDIA GPU, and this machine has none "
                                     f"({why}); use --backend model")
        raise BackendUnavailable(f"the {requested} backend is not built yet in this version of tracker; "
                                 "use --backend model")
    if not count:
        return "model", f"no CUDA device: {why}"
    return "model", f"{why} found, but the events and ncu backends are not built yet in this version"


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
    echo: Callable[[str], None] = lambda line: None,
) -> Profile:
    """Profile ``net`` at ``batch`` into the trace database ``db`` and return what was stored."""
    from tracker.store import open_store, recording

    chosen, reason = choose_backend(backend)  # before the database: a refusal creates no file
    echo(f"backend: {chosen} ({reason})")
    store = open_store(db, write=True)
    predictions = predict(net, batch, device, dtype_bits, phases)
    peak = memory(net, batch, dtype_bits)
    fields = dict(
        network=net.name, network_options=net.options, batch=batch, phases=phases, dtype_bits=dtype_bits,
        variants=variants or {}, l1_bypass=l1_bypass, backend=chosen, backend_reason=reason, repeat=0,
        predicted_peak_bytes=peak.peak_bytes,
    )
    if device is not None:
        fields.update(device_name=device.name, compute_capability=device.compute_capability,
                      sm_count=device.sm_count)
    with recording(store, **fields) as run:
        echo(f"run {run.run_id}: storing {len(net.layers)} layers and {len(predictions)} layer-phase predictions")
        run.add_layers(net, predictions)
    store.dispose()
    return Profile(run.run_id, store.where, chosen, reason, predictions, peak)
