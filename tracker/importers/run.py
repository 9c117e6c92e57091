"""An imported profile stored as a run: its launches placed in layers and phases by their ranges.

A range named as tracker names its own (``conv1/fwd``) is that layer and phase; ``layers``, a
regular expression, picks the range that names a layer among a launch's ranges (the innermost it
matches; its first group, where it has one, is the name); otherwise the innermost range is the
layer, or the kernel where no range is open. A layer's phase is ``fwd`` unless its range names one.
Each new instance of a layer phase's range (the ranges around it changed since the launch before)
is a measured iteration of it, unless the profile marks its iterations itself (``ImportedLaunch.iteration``).

With ``network`` (a tracker network, or a ``--torch`` model's), the layers must be its own and the
model's predictions stand beside the measurement; otherwise each layer is a range of the file, the
run's network is named after the file, and its predictions are blank (no model knows a range).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tracker.errors import TrackerError, UnknownName
from tracker.importers.base import CALL, OPERATOR_KINDS, WHOLE_PHASE, Imported, ImportedLaunch
from tracker.phases import PHASES

if TYPE_CHECKING:
    from tracker.model import Device, Prediction
    from tracker.nets import Layer, Network

IMPLEMENTATION = "imported"  # run.implementation of every imported run
BLANK = "imported: no model of this layer (a range of another tool's profile, no tracker network's layer)"
WHOLE = "imported: the layer's whole backward (both gradients, as the profile ran them); the model predicts them apart"


def import_file(
    db: str | None,
    path: str | Path,
    network: Network | None = None,
    layers: str | None = None,
    batch: int = 1,
    echo: Callable[[str], None] = lambda line: None,
) -> int:
    """Read ``path`` and store it as a run in ``db``; the run's id. Everything is checked before
    the database is opened: a file that cannot be read stores nothing."""
    from tracker.importers.formats import read
    from tracker.model.roofline import check_batch
    from tracker.store import open_store, recording

    check_batch(batch)
    pattern = _pattern(layers)
    imported = read(path)
    _check(imported)
    placed = place(imported.launches, pattern)
    net = network or _network(Path(path).name, placed)
    kept = _onto(net, imported, placed) if network else list(zip(imported.launches, placed))
    rows = _rows(kept, net)
    ran = {(layer, phase) for _, (layer, phase, _) in kept}
    predictions = _predictions(net, batch, imported, network is not None, ran)
    echo(f"{imported.format}: {len(rows)} launches in {len(net.layers)} layers, by {imported.tool}")
    fields = _fields(imported, net, batch, [where for _, where in kept])
    if network is None:
        fields["backend_reason"] += "; its layers are the file's ranges, which no model knows: predictions blank"
    if len(kept) < len(imported.launches):
        fields["library"]["outside"] = _outside(imported, kept, net, echo)
    store = open_store(db, write=True)
    with recording(store, **fields) as run:
        run.add_layers(net, predictions)
        metrics = [
            dict(invocation=i, name=name, value=value)
            for i, (launch, _) in enumerate(kept)
            for name, value in sorted(launch.metrics.items())
        ]
        run.add_launches(rows)
        if metrics:
            run.add_counters(rows, metrics, imported.sources)
    store.dispose()
    return run.run_id


INT32, INT64 = 1 << 31, 1 << 63


def _check(imported: Imported) -> None:
    """Every launch's figures fit the store's columns, before the store is opened: a file that
    holds a grid of 10^30 or a negative time is refused, not half stored."""
    for i, k in enumerate(imported.launches):
        whole = [*k.grid, *k.block, k.shared_bytes, k.registers or 0]
        bad: float | None = next((n for n in whole if not 0 <= n < INT32), None)
        if bad is None and k.time_ms is not None and not 0 <= k.time_ms < 1e12:
            bad = k.time_ms
        if bad is None and k.start_ns is not None and not -INT64 <= k.start_ns < INT64:
            bad = k.start_ns
        if bad is not None:
            raise TrackerError(f"{imported.path}: launch {i} ({k.kernel_name[:60]}) holds {bad!r}, out of range")


def _pattern(layers: str | None) -> re.Pattern | None:
    if layers is None:
        return None
    try:
        return re.compile(layers)
    except re.error as exc:
        raise TrackerError(f"--layers {layers!r} is not a regular expression: {exc}") from None


Placed = tuple[str, str, int]  # (layer, phase, which instance of it: the measured iteration)


def place(launches: list[ImportedLaunch], pattern: re.Pattern | None = None) -> list[Placed]:
    """Each launch's layer, phase and iteration, by its ranges (the module's docstring)."""
    placed: list[Placed] = []
    seen: dict[tuple[str, str], int] = {}
    before: tuple | None = None
    for launch in launches:
        layer, phase = _layer_phase(launch, pattern)
        phase = launch.phase or phase
        here = (layer, phase, launch.ranges)
        if here != before:
            seen[layer, phase] = seen.get((layer, phase), -1) + 1
        placed.append((layer, phase, seen[layer, phase] if launch.iteration is None else launch.iteration))
        before = here
    return placed


def _layer_phase(launch: ImportedLaunch, pattern: re.Pattern | None) -> tuple[str, str]:
    for name in reversed(launch.ranges):
        if pattern is not None:
            found = pattern.search(name)
            if found:
                return (found.group(1) if pattern.groups else name), "fwd"
            continue
        layer, _, phase = name.rpartition("/")
        return (layer, phase) if layer and phase in PHASES else (name, "fwd")
    return launch.kernel_name.split("(", 1)[0].strip(), "fwd"


def _network(name: str, placed: list[Placed]) -> Network:
    """One layer a range (or kernel), in the order they first ran; no shapes, no weights."""
    from tracker.nets import Network
    from tracker.nets.layers import Module

    net = Network(name, (1,), {})
    for layer in dict.fromkeys(layer for layer, _, _ in placed):
        net.add(layer, Module(type="range", output=(1,)))
    return net


def _onto(net: Network, imported: Imported, placed: list[Placed]) -> list[tuple[ImportedLaunch, Placed]]:
    """The launches that ran in a layer of ``net``, each placed in it: a layer named as the
    network's, or an operator call (``aten::conv2d#2``) taken as the network's layer of its kind and
    number (the third conv). The others ran in no layer of it."""
    names = {layer.name for layer in net.layers}
    of_kind: dict[str, list[str]] = {}
    for layer in net.layers:
        of_kind.setdefault(layer.kind, []).append(layer.name)

    def layer_of(name: str) -> str | None:
        call = CALL.match(name)
        if name in names or call is None:
            return name if name in names else None
        same = of_kind.get(OPERATOR_KINDS.get(call["operator"], ""), [])
        number = int(call["number"])
        return same[number] if number < len(same) else None

    kept = [
        (launch, (mapped, phase, repeat))
        for launch, (name, phase, repeat) in zip(imported.launches, placed)
        if (mapped := layer_of(name)) is not None
    ]
    if not kept:
        raise TrackerError(
            f"{imported.path}: no launch ran in a layer of {net.name} (--layers REGEX picks the ranges that "
            "name its layers; without --network each range is a layer of its own)"
        )
    return kept


def _outside(imported: Imported, kept: list, net: Network, echo: Callable[[str], None]) -> dict:
    """What ran in no layer of the network, said and recorded: not stored, but not hidden."""
    ids = {id(launch) for launch, _ in kept}
    left = [launch for launch in imported.launches if id(launch) not in ids]
    ms = sum(launch.time_ms or 0.0 for launch in left)
    names = sorted({launch.kernel_name.split("(", 1)[0][:50] for launch in left})
    echo(f"{len(left)} launches ({ms:.3f} ms) ran in no layer of {net.name} and are not stored: {', '.join(names[:8])}")
    return {"launches": len(left), "time_ms": ms}


def _rows(kept: list[tuple[ImportedLaunch, Placed]], net: Network) -> list[dict]:
    from tracker.gpu.workload import LoggedLaunch

    ids = {layer.name: layer.id for layer in net.layers}
    starts = [k.start_ns for k, _ in kept if k.start_ns is not None]
    origin = min(starts, default=0)
    return [
        LoggedLaunch(
            i,
            ids[layer],
            layer,
            phase,
            repeat,
            k.kernel_name,
            IMPLEMENTATION,
            "ca",  # the store's column takes ca or cg; another tool's build is not known
            k.grid,
            k.block,
            k.shared_bytes,
            k.registers,
            k.time_ms,
            start_ns=None if k.start_ns is None else k.start_ns - origin,
        ).row()
        for i, (k, (layer, phase, repeat)) in enumerate(kept)
    ]


def _predictions(
    net: Network, batch: int, imported: Imported, modelled: bool, ran: set[tuple[str, str]]
) -> list[Prediction]:
    """The model's, for the GPU of the profile where the catalog knows it, on a tracker network (every
    layer, in the phases the profile ran); blank rows (no figures, the reason) for the layer phases
    that ran where no model applies: on a network of ranges, and for a backward stored whole (the
    model predicts its two gradients apart)."""
    from tracker.model import predict
    from tracker.phases import ORDER

    def blanks(phases: set[str], why: str) -> list[Prediction]:
        return [
            _blank(layer, phase, why)
            for layer in net.layers
            for phase in sorted(phases, key=ORDER.__getitem__)
            if (layer.name, phase) in ran
        ]

    phases = {phase for _, phase in ran}
    if not modelled:
        return blanks(phases, BLANK)
    found = [p for p in predict(net, batch, _device(imported.device_name)) if p.phase in phases]
    if imported.backward_whole and WHOLE_PHASE in phases:
        found = [p for p in found if p.phase == "fwd"] + blanks({WHOLE_PHASE}, WHOLE)
    return found


def _blank(layer: Layer, phase: str, why: str) -> Prediction:
    from tracker.model import Prediction

    shape = list(layer.output_shape)
    return Prediction(layer.id, layer.name, layer.kind, phase, shape, 0, 0, 0, 0, 0.0, convention=why)


def _device(name: str | None) -> Device | None:
    from tracker.model import lookup

    try:
        return lookup(name) if name else None
    except UnknownName:
        return None


def _repeats(placed: list[Placed]) -> int:
    return max((repeat for _, _, repeat in placed), default=0) + 1


def _fields(imported: Imported, net: Network, batch: int, placed: list[Placed]) -> dict:
    phases = {phase for _, phase, _ in placed}
    return dict(
        network=net.name,
        network_options=dict(net.options),
        batch=batch,
        phases="fwd" if phases == {"fwd"} else "both",
        dtype_bits=32,
        variants={},
        l1_bypass=False,
        loaders=IMPLEMENTATION,
        implementation=IMPLEMENTATION,
        library={"file": str(Path(imported.path).resolve()), "format": imported.format, "tool": imported.tool},
        backend=imported.collector,
        backend_reason=f"imported from {imported.path} ({imported.tool})",
        repeat=_repeats(placed),
        predicted_peak_bytes=None,
        device_name=imported.device_name,
        compute_capability=imported.compute_capability,
        sm_count=imported.sm_count,
        collector_version=imported.tool,
        collector_settings=imported.settings,
    )
