"""`tracker tune`: a schedule search for the GEMM-shaped launches (paper 001's approach), and
the algorithm of each layer phase with it.

For each layer phase whose launch is built on the tiled GEMM (tracker/ops/gemm.py), and for each of
its op's variants that computes it by an algorithm of its own (``Op.rivals``: direct, implicit and
explicit GEMM, Winograd F(2x2) and F(4x4), FFT, where each applies) unless
``--variant`` chose the op's, every candidate ``Tile`` (CTA tile shape, k-tile, split-K slices),
then each neighbour of the fastest (its other pipeline depths, warp layout and register policy: one
axis at a time, so the search grows by a few candidates rather than several times over), is
compiled through the registry's ``-D`` sizes, checked against the NumPy reference (at a small
batch: the reference is float64 NumPy; each variant held to its own bound, the selftest's), and
timed at the real batch (median of ``reps``, L2 flushed before each). Every candidate and its time
goes to the trace database's ``tuning`` table; from then on a profile on that GPU runs the fastest
verified variant and tile for each layer phase (``best``), unless told otherwise.

Backend-neutral like the executor: a GPU times with CUDA events (tracker/gpu/timing.py, the one
timing routine); the tests run the same search on the CPU emulation (host wall-clock times,
recorded as such). ``run`` is the command: it opens the GPU backend and the store, searches,
stores and summarizes; the CuPy backend and the plan are imported inside functions (as
tracker/profile.py does), and nothing under tracker/gpu imports this module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from time import perf_counter
from typing import TYPE_CHECKING, Any

import numpy as np

from tracker.gpu.timing import drain, repeat
from tracker.nets import Network
from tracker.ops import OPS, Case, Op
from tracker.ops.gemm import DEFAULT, SHAPES, Tile
from tracker.ops.launch import Arrays, Backend
from tracker.ops.selftest import run_case

if TYPE_CHECKING:  # SQLAlchemy is imported only where the store is used
    from tracker.gpu.network import Step
    from tracker.store import Store

SPLITS = (0, 1, 2, 4, 8, 16, 32, 64)  # split-K slices tried with each tile shape (0: by rule)


@dataclass(frozen=True)
class Target:
    """One tunable layer phase by one variant: timed at ``case``, verified at ``check`` (a small
    batch); ``planned``: the variant the plan runs there."""

    layer: str
    op: str
    variant: str
    phase: str
    case: Case
    check: Case
    planned: str

    @property
    def shape(self) -> str:
        return shape_key(self.case)

    @property
    def tunable(self) -> bool:
        """Whether its launch is built on the tiled GEMM (else it runs its own schedule)."""
        return OPS[self.op].variant(self.variant).launches[self.phase].tunable


def shape_key(case: Case) -> str:
    """The tuning table's shape: input shapes and parameters, e.g. 'w=64x3x11x11 x=128x3x227x227 pad=2 stride=4'."""
    return " ".join(
        [
            *(f"{k}={'x'.join(map(str, v))}" for k, v in sorted(case.shapes.items())),
            *(f"{k}={v}" for k, v in sorted(case.params.items())),
        ]
    )


def targets(
    net: Network,
    batch: int,
    chosen: dict[str, str],
    verify_batch: int = 2,
    distinct: bool = True,
    steps: Sequence[Step] | None = None,
) -> list[Target]:
    """The tunable layer phases of ``net``'s plan (``steps``, where the caller has planned it),
    each by every variant that may run it (``variants``); ``distinct``: one per (op, variant,
    phase, shape), else one per (layer, phase, variant)."""
    from tracker.gpu.network import LAUNCHES_NOTHING, plan

    found: dict[tuple, Target] = {}
    for step in plan(net, chosen, batch=batch, by_rule=True) if steps is None else steps:
        if step.variant in LAUNCHES_NOTHING:
            continue
        op = OPS.of(step.layer)
        if not op.variant(step.variant).launches[step.phase].tunable:
            continue
        case, check = op.case(step.layer, batch), op.case(step.layer, verify_batch)
        for variant in variants(op, step.variant, step.phase, case, op.kind in chosen):
            target = Target(step.layer.name, op.kind, variant, step.phase, case, check, step.variant)
            key = (
                (target.op, variant, target.phase, target.shape) if distinct else (target.layer, target.phase, variant)
            )
            found.setdefault(key, target)
    return list(found.values())


def variants(op: Op, planned: str, phase: str, case: Case, pinned: bool) -> tuple[str, ...]:
    """What may run a layer phase the plan gives ``planned``: it, then its op's other rivals there
    (``Op.rivals``), unless ``--variant`` chose the op's variant (``pinned``) or the planned one is
    no rival (a fused variant, which changes the plan)."""
    rivals = op.rivals(case, phase)
    return (planned, *(v for v in rivals if v != planned)) if planned in rivals and not pinned else (planned,)


def candidates(shapes: tuple[Tile, ...] = SHAPES, splits: tuple[int, ...] = SPLITS) -> tuple[Tile, ...]:
    return tuple(replace(shape, split=s) for shape in shapes for s in splits)


def search(
    b: Backend,
    targets: list[Target],
    tiles: tuple[Tile, ...],
    reps: int,
    device_name: str,
    echo: Callable[[str], None] = lambda line: None,
    refine: bool = True,
    keep: Callable[[list[dict]], None] = lambda rows: None,
    deadline: float | None = None,
) -> list[dict]:
    """Verify and time every tile at every target, then (``refine``) the neighbours of the
    target's fastest verified one (``Tile.neighbours``); a target whose launch is not on the
    tiled GEMM (a direct convolution) once, as it is built; a row per
    (target, tile) for the tuning table, handed to ``keep`` target by target (so that an
    interrupted search keeps what it finished). A tile whose split-K slices come out the same as
    an earlier one's at this shape is skipped; one that fails to compile or run is reported and
    skipped, and the search goes on. Past ``deadline`` (a perf_counter time) no candidate starts."""
    verified: dict[tuple, dict[str, float | None]] = {}
    rows: list[dict] = []

    def spent() -> bool:
        return deadline is not None and perf_counter() > deadline

    for n, target in enumerate(targets, 1):
        tried = _search_target(b, target, tiles, reps, device_name, echo, refine, verified, spent)
        rows += tried.values()
        keep(list(tried.values()))
        best = fastest(rows, target)
        found = f"{best['tile']} {best['time_ms']:.3f} ms" if best else "none verified" if tried else "none tried"
        echo(f"[{n}/{len(targets)}] {target.layer} {target.phase} ({target.variant}): {found}")
        if spent():
            echo(f"time budget spent: {n} of {len(targets)} layer phases searched")
            break
    return rows


def _search_target(
    b: Backend,
    target: Target,
    tiles: tuple[Tile, ...],
    reps: int,
    device_name: str,
    echo: Callable[[str], None],
    refine: bool,
    verified: dict[tuple, dict[str, float | None]],
    spent: Callable[[], bool],
) -> dict[Tile, dict]:
    """``search`` at one target: each tile tried, then the fastest one's neighbours; the tile, with
    the split-K slices that ran -> its row."""
    arrays = _arrays(b, target.case)
    tried: dict[Tile, dict] = {}

    def attempt(tile: Tile) -> None:
        try:
            timed = _time(b, target, arrays, tile, reps)
            key = replace(tile, split=timed["splits"])
            if key not in tried:
                error, passed = _verify(b, target, tile, verified).get(target.phase, (None, False))
                tried[key] = _row(target, tile, timed, error, passed, device_name)
        except Exception as exc:  # noqa: BLE001 (a candidate's failure is a result, not the search's end)
            why = (str(exc).strip().splitlines() or [""])[0][:200]
            echo(f"  {target.layer} {target.phase}: {tile.label} failed ({type(exc).__name__}: {why})")

    for tile in tiles if target.tunable else (DEFAULT,):
        if not spent():
            attempt(tile)
    top = fastest(list(tried.values()), target)
    for tile in Tile.parse(top["tile"]).neighbours() if refine and target.tunable and top else ():
        if not spent():
            attempt(tile)
    return tried


def _row(
    target: Target, tile: Tile, timed: dict[str, Any], error: float | None, passed: bool, device_name: str
) -> dict:
    """One tuning-table row."""
    from tracker import __version__

    return {
        "device_name": device_name,
        "op": target.op,
        "variant": target.variant,
        "phase": target.phase,
        "layer": target.layer,
        "shape": target.shape,
        "tile": tile.label,
        "verified": passed,
        "error": error,
        **timed,
        "tracker_version": __version__,
        "created_at": datetime.now(UTC),
    }


def summary(targets: list[Target], rows: list[dict]) -> list[dict]:
    """Per target: its fastest verified tile and time, the default tile's, and how many were tried."""
    out = []
    for target in targets:
        mine = [
            r
            for r in rows
            if (r["op"], r["variant"], r["phase"], r["shape"])
            == (target.op, target.variant, target.phase, target.shape)
        ]
        top = fastest(rows, target)
        default = next((r["time_ms"] for r in mine if r["tile"] == DEFAULT.label and r["verified"]), None)
        out.append(
            {
                "layer": target.layer,
                "phase": target.phase,
                "variant": target.variant,
                "shape": target.shape,
                "best": top["tile"] if top else None,
                "best_ms": top["time_ms"] if top else None,
                "default_ms": default,
                "speedup": default / top["time_ms"] if top and default and top["time_ms"] else None,
                "tried": len(mine),
            }
        )
    return out


def fastest(rows: list[dict], target: Target) -> dict | None:
    """The fastest verified row of ``target``'s op, variant, phase and shape."""
    mine = [
        r
        for r in rows
        if r["verified"]
        and r["time_ms"] is not None
        and (r["op"], r["variant"], r["phase"], r["shape"]) == (target.op, target.variant, target.phase, target.shape)
    ]
    return min(mine, key=lambda r: r["time_ms"], default=None)


def _verify(b: Backend, target: Target, tile: Tile, cache: dict) -> dict[str, tuple[float, bool]]:
    """Per phase of ``tile`` at the verification case, the worst error and whether every output
    is within its bound: the selftest's, the op's scaled by the variant's ``error_scale`` (every
    phase runs: the op's check feeds each phase the last one's output)."""
    key = (target.op, target.variant, shape_key(target.check), tile)
    if key not in cache:
        found: dict[str, tuple[float, bool]] = {}
        for result in run_case(b, target.check, target.variant, seed=7, tile=tile):
            error, passed = found.get(result.phase, (0.0, True))
            found[result.phase] = (max(error, result.error), passed and result.passed)
        cache[key] = found
    return cache[key]


def _arrays(b: Backend, case: Case) -> Arrays:
    rng = np.random.default_rng(11)
    shapes = OPS[case.op].arrays(case)
    return Arrays(**{role: b.asarray(rng.normal(size=shape).astype(np.float32)) for role, shape in shapes.items()})


def _time(b: Backend, target: Target, arrays: Arrays, tile: Tile, reps: int) -> dict[str, Any]:
    """Median time and spread of the phase's launches over ``reps`` (tracker.gpu.timing: L2
    flushed before each, CUDA events where the backend has them, else the host clock), after one
    warm-up launch that compiles and says how many split-K slices ran."""

    def launch() -> None:
        OPS[target.op].launch(b, target.variant, target.phase, arrays, **target.case.params, tile=tile)

    b.log.clear()
    launch()
    b.synchronize()
    splits = tile.splits_in(b.log) if target.tunable else 0
    b.log.clear()
    timed = repeat(launch, reps, b.synchronize, events=drain(b.log), flush=getattr(b, "flush_l2", None))
    return {"splits": splits, "time_ms": timed.median_ms, "spread_pct": timed.spread_pct, "timer": timed.timer}


def store(db_store: Store, rows: list[dict]) -> None:
    """Add the rows to the ``tuning`` table (tracker.store.tuning)."""
    from tracker.store.tuning import add_candidates

    add_candidates(db_store, rows)


@dataclass(frozen=True)
class Tuned:
    """What a profile runs from the tuning table, keyed 'layer/phase': the tile where it is not the
    default, and the variant where it is not the plan's (``Tuned()``: nothing tuned, the plan as it
    is); ``chosen``: every layer phase whose variant and tile it chose, the default tile's too."""

    tiles: dict[str, str] = field(default_factory=dict)
    variants: dict[str, str] = field(default_factory=dict)
    chosen: frozenset[str] = frozenset()

    def applied(self, steps: Sequence[Step]) -> list[Step]:
        """``steps`` (a plan) with the variants chosen here."""
        return [replace(s, variant=self.variants.get(f"{s.layer.name}/{s.phase}", s.variant)) for s in steps]

    def over(self, fitted: Mapping[str, str]) -> dict[str, str]:
        """The tiles a profile runs: the tuned ones, and ``fitted`` (the plan's own,
        ``network.fitted_tiles``) wherever the table chose none."""
        return {key: tile for key, tile in fitted.items() if key not in self.chosen} | self.tiles


def best(
    db_store: Store,
    device_name: str,
    net: Network,
    batch: int,
    chosen: dict[str, str],
    steps: Sequence[Step] | None = None,
) -> Tuned:
    """For every tunable layer phase of the plan (``steps``: the caller's) tuned on
    ``device_name`` at its shape, the fastest verified variant and tile of those that may run it
    (``variants``). Empty where nothing was tuned, and where the search never timed the plan's
    own variant (an older search, before the conv rule chose it): a rival beats it only measured."""
    from tracker.store.tuning import fastest

    found = targets(net, batch, chosen, distinct=False, steps=steps)
    times = fastest(db_store, device_name, [(t.op, t.variant, t.phase, t.shape) for t in found])
    measured = {f"{t.layer}/{t.phase}" for t, hit in zip(found, times) if hit is not None and t.variant == t.planned}
    won: dict[str, tuple[Target, str, float]] = {}
    for target, hit in zip(found, times):
        key = f"{target.layer}/{target.phase}"
        if hit is not None and key in measured and (key not in won or hit[1] < won[key][2]):
            won[key] = (target, *hit)
    return Tuned(
        {key: tile for key, (_, tile, _) in won.items() if tile != DEFAULT.label},
        {key: t.variant for key, (t, _, _) in won.items() if t.variant != t.planned},
        frozenset(won),
    )


def run(
    db: str | None,
    net: Network,
    batch: int,
    chosen: dict[str, str],
    reps: int,
    verify_batch: int,
    quick: bool,
    echo: Callable[[str], None],
    budget_s: float = 0,
) -> list[dict]:
    """`tracker tune` on this GPU: search (no candidate starts after ``budget_s`` seconds, if
    set), store every candidate, and summarize per layer phase and variant: this search's
    fastest, and the variant and tile `tracker profile` now runs there (``runs``: the fastest
    verified in the database, which an earlier search may have found)."""
    from tracker.gpu.network import check_indexing, fitted_tiles
    from tracker.gpu.runner import open_cupy_backend
    from tracker.store import open_store

    check_indexing(net, batch)
    backend, device = open_cupy_backend("ca")
    db_store = open_store(db, write=True)  # before the search: a database that cannot be written fails first
    found = targets(net, batch, chosen, verify_batch)
    tiles = candidates((DEFAULT,)) if quick else candidates()
    echo(f"device: {device['device_name']}; {len(found)} layer phases x {len(tiles)} candidate tiles")
    rows = search(
        backend,
        found,
        tiles,
        reps,
        device["device_name"],
        echo,
        keep=lambda done: store(db_store, done),  # target by target: Ctrl-C keeps them
        deadline=perf_counter() + budget_s if budget_s else None,
    )
    echo(f"stored {len(rows)} candidates in {db_store.where}")
    tuned = best(db_store, device["device_name"], net, batch, chosen)
    db_store.dispose()
    ran = {f"{t.layer}/{t.phase}": tuned.variants.get(f"{t.layer}/{t.phase}", t.planned) for t in found}
    running = tuned.over(fitted_tiles(net, ran, batch))

    def runs(key: str) -> str:  # 'variant tile': what `tracker profile` now runs at a layer phase
        return f"{ran[key]} {running.get(key, DEFAULT.label)}"

    return [row | {"runs": runs(f"{row['layer']}/{row['phase']}")} for row in summary(found, rows)]
