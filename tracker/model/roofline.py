"""Per layer and phase: ops, compulsory bytes, arithmetic intensity and, for a device, the roofline;
and every convolution algorithm's prediction side by side (``compare``).

The roofline (Williams et al.; paper 000 eq. 2): attainable FLOP/s = min(peak, intensity x
bandwidth); predicted time = max(ops / peak, bytes / bandwidth); a phase is compute-bound when its
intensity reaches the device's ridge point, memory-bound below it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from tracker.errors import TrackerError, unknown, whole_number
from tracker.model.algorithms import ALGORITHMS, check_algorithm
from tracker.model.costs import CONVENTIONS, Cost, costs
from tracker.model.devices import Device
from tracker.nets import Network
from tracker.nets.layers import Layer
from tracker.phases import PHASE_SETS
from tracker.stats import best_of

DTYPE_BITS = (8, 16, 32, 64)


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
    algorithm: str | None = None  # a conv phase costed by a named algorithm (predict's ``algorithm``)
    workspace_bytes: int | None = None

    def to_dict(self, with_device: bool = True, with_convention: bool = True) -> dict:
        row = asdict(self)
        if self.algorithm is None:
            del row["algorithm"], row["workspace_bytes"]
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


def check_phases(phases: str) -> str:
    if phases not in PHASE_SETS:
        raise unknown("phases", str(phases), list(PHASE_SETS))
    return phases


def check_batch(batch: int) -> int:
    return whole_number(batch, "batch", 1, MAX_BATCH)


MAX_BATCH = 65536


def _phase_costs(layer: Layer, batch: int, algorithm: str | Mapping[str, str] | None) -> dict[str, Cost]:
    """``costs`` of each phase, by the algorithm named for all conv phases or for that layer phase."""
    if not isinstance(algorithm, Mapping):
        return costs(layer, batch, algorithm)
    return {phase: costs(layer, batch, algorithm.get(f"{layer.name}/{phase}"))[phase] for phase in layer.phases}


def predict(
    net: Network,
    batch: int,
    device: Device | None = None,
    dtype_bits: int = 32,
    phases: str = "both",
    algorithm: str | Mapping[str, str] | None = None,
) -> list[Prediction]:
    """One row per layer and phase, in network order then phase order; conv phases by
    ``algorithm`` where one is named (tracker/model/algorithms.py): one for every conv phase, or
    one per 'layer/phase' (a plan's, tracker.gpu.network.algorithms)."""
    check_batch(batch)
    for name in [algorithm] if not isinstance(algorithm, Mapping) else algorithm.values():
        if name is not None:
            check_algorithm(name)
    width = check_dtype_bits(dtype_bits) // 8
    wanted = PHASE_SETS[check_phases(phases)]
    rows = []
    for layer in net.layers:
        for phase, cost in _phase_costs(layer, batch, algorithm).items():
            if phase not in wanted:
                continue
            nbytes = cost.elements * width
            attainable, ms, bound = roofline(cost.ops, nbytes, device) if device else (None, None, None)
            convention = f"{cost.algorithm}: {cost.note}" if cost.algorithm else CONVENTIONS[layer.op.counted_as()]
            rows.append(
                Prediction(
                    layer.id,
                    layer.name,
                    layer.kind,
                    phase,
                    list(layer.output_shape),
                    layer.params,
                    cost.macs,
                    cost.ops,
                    nbytes,
                    cost.ops / nbytes,
                    attainable,
                    ms,
                    bound,
                    convention,
                    cost.algorithm,
                    cost.workspace * width if cost.algorithm else None,
                )
            )
    return rows


def compare(net, batch: int, device=None, dtype_bits: int = 32, phases: str = "both") -> list[dict]:
    """Every algorithm on every conv layer phase, side by side: its multiplies, transform FLOPs,
    workspace and (with a device) roofline time; ``best`` says of each layer phase's fastest (the
    fewest FLOPs without a device) among the algorithms that apply to it 'yes', or 'tie' where
    several are equal to the digits shown (tracker.stats.best_of), and 'no' of the others."""
    rows = [
        dict(
            p.to_dict(with_device=device is not None, with_convention=False),
            note=p.convention,
            multiplies=p.macs,
            transform_flops=p.ops - 2 * p.macs,
        )
        for name in ALGORITHMS
        for p in predict(net, batch, device, dtype_bits, phases, name)
        if p.algorithm is not None and p.algorithm == name
    ]  # a fallback to direct is direct's row
    key = "predicted_ms" if device is not None else "ops"
    for layer_phase in {(r["layer_id"], r["phase"]) for r in rows}:
        mine = [r for r in rows if (r["layer_id"], r["phase"]) == layer_phase]
        fastest = best_of([r[key] for r in mine])
        for i, r in enumerate(mine):
            r["best"] = "no" if i not in fastest else "yes" if len(fastest) == 1 else "tie"
    order = {name: i for i, name in enumerate(ALGORITHMS)}
    return sorted(rows, key=lambda r: (r["layer_id"], r["phase"] != "fwd", r["phase"], order[r["algorithm"]]))


ROOF_LEVELS = ("L1", "L2", "DRAM")  # fastest first; a point's intensity is FLOPs per byte at one of them


@dataclass(frozen=True)
class Roofs:
    """A device's ceilings: FP32 FLOP/s and the bandwidth of each memory level that has one, each
    with where it came from (the catalog, or ncu's peaks at the clocks of a profiled run)."""

    flops_per_s: float
    bandwidth: dict[str, float]  # level -> bytes/s, in ROOF_LEVELS order
    source: dict[str, str]  # 'FP32' and each level -> where the figure came from
    device: str = ""

    @classmethod
    def of(cls, device: Device) -> Roofs:
        levels = {"L1": device.l1_bandwidth, "L2": device.l2_bandwidth, "DRAM": device.bandwidth}
        bandwidth = {level: value for level, value in levels.items() if value}
        return cls(device.peak_flops, bandwidth, {key: "catalog" for key in ("FP32", *bandwidth)}, device.name)

    def ridge(self, level: str) -> float:
        """The intensity (FLOP/byte at ``level``) where that level's roof meets the compute roof."""
        return self.flops_per_s / self.bandwidth[level]

    def merged(self, fallback: Roofs) -> Roofs:
        """These roofs, with ``fallback``'s for the levels these lack (in ROOF_LEVELS order)."""
        levels = [level for level in ROOF_LEVELS if level in self.bandwidth or level in fallback.bandwidth]
        pick = {level: self if level in self.bandwidth else fallback for level in levels}
        return Roofs(
            self.flops_per_s,
            {level: pick[level].bandwidth[level] for level in levels},
            {"FP32": self.source["FP32"], **{level: pick[level].source[level] for level in levels}},
            self.device or fallback.device,
        )
