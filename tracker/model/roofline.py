"""Per layer and phase: ops, compulsory bytes, arithmetic intensity and, for a device, the roofline.

The roofline (Williams et al.; paper 000 eq. 2): attainable FLOP/s = min(peak, intensity x
bandwidth); predicted time = max(ops / peak, bytes / bandwidth); a phase is compute-bound when its
intensity reaches the device's ridge point, memory-bound below it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tracker.errors import TrackerError
from tracker.model.costs import CONVENTIONS, costs
from tracker.model.devices import Device
from tracker.nets import Network

DTYPE_BITS = (8, 16, 32, 64)
PHASE_SETS = {"fwd": ("fwd",), "bwd": ("bwd_data", "bwd_weight"), "both": ("fwd", "bwd_data", "bwd_weight")}


@dataclass(frozen=True)
class Prediction:
    layer_id: int
    layer: str
    kind: str
    phase: str
    output_shape: list[int]
    params: int
    macs: int
    ops: int
    bytes: int
    intensity: float  # FLOP per byte
    attainable_gflops: float | None = None
    predicted_ms: float | None = None
    bound: str | None = None
    convention: str = ""

    def to_dict(self, with_device: bool = True, with_convention: bool = True) -> dict:
        row = asdict(self)
        if not with_device:
            for key in ("attainable_gflops", "predicted_ms", "bound"):
                del row[key]
        if not with_convention:
            del row["convention"]
        return row


def roofline(ops: int, nbytes: int, device: Device) -> tuple[float, float, str]:
    """(attainable GFLOP/s, predicted ms, bound) of ``ops`` over ``nbytes`` on ``device``."""
    intensity = ops / nbytes if nbytes else float("inf")
    attainable = min(device.peak_flops, intensity * device.bandwidth)
    seconds = max(ops / device.peak_flops, nbytes / device.bandwidth)
    bound = "compute" if intensity >= device.ridge else "memory"
    return attainable / 1e9, seconds * 1e3, bound


def check_dtype_bits(bits: int) -> int:
    if bits not in DTYPE_BITS:
        raise TrackerError(f"dtype bits {bits} is not one of {', '.join(map(str, DTYPE_BITS))}")
    return bits


def check_batch(batch: int) -> int:
    if not 1 <= batch <= MAX_BATCH:
        raise TrackerError(f"batch {batch} is out of range 1..{MAX_BATCH}")
    return batch


MAX_BATCH = 65536


def predict(
    net: Network,
    batch: int,
    device: Device | None = None,
    dtype_bits: int = 32,
    phases: str = "both",
) -> list[Prediction]:
    """One row per layer and phase, in network order then phase order."""
    check_batch(batch)
    width = check_dtype_bits(dtype_bits) // 8
    wanted = PHASE_SETS[phases]
    rows = []
    for layer in net.layers:
        for phase, cost in costs(layer, batch).items():
            if phase not in wanted:
                continue
            nbytes = cost.elements * width
            extra = roofline(cost.ops, nbytes, device) if device else (None, None, None)
            rows.append(Prediction(
                layer.id, layer.name, layer.kind, phase, list(layer.output_shape), layer.params,
                cost.macs, cost.ops, nbytes, cost.ops / nbytes, *extra, CONVENTIONS[layer.kind],
            ))
    return rows
