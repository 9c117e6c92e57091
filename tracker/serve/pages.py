"""What each page of `tracker serve` shows, as plain data for its template: the store's own
queries and analyses (the same numbers `tracker show`, `compare`, `sql` and the report print), each
table cell with its text in the column's unit and its raw value to sort by."""

from __future__ import annotations

import json
from itertools import islice
from typing import Any
from urllib.parse import quote

from tracker import units
from tracker.errors import Mismatch, StoreError, TrackerError, shorten
from tracker.phases import PHASES
from tracker.store import Store

ROWS = 1000  # the most rows the SQL box shows, as `tracker sql`'s table does
RUN_COLUMNS = ("run_id", "status", "network", "batch", "phases", "backend", "device_name", "implementation",
               "started_at", "layers", "launches", "predicted_ms", "measured_ms")  # fmt: skip
EXPERIMENT_COLUMNS = ("id", "kind", "status", "network", "batch", "started_at", "finished_at")
LAYER_COLUMNS = ("layer", "kind", "phase", "ops", "bytes", "intensity", "predicted_ms", "median_ms", "spread_pct",
                 "idle_ms", "achieved_gflops", "bound", "algorithm")  # fmt: skip
STALLS = ("first_reason", "first_share", "second_reason", "second_share")
TRAFFIC = ("l1_bytes", "l2_bytes", "dram_read_bytes", "dram_write_bytes", "dram_throughput_pct")
SECTIONS = (  # (view, title, its columns after layer and phase)
    ("stall_breakdown", "Stalls: the two dominant reasons", STALLS),
    ("cache_hit_rate", "Cache hit rates", ("l1_hit_rate", "l2_hit_rate")),
    ("memory_traffic", "Traffic per memory level", TRAFFIC),
)
BASES = {  # what a roofline's points are, by roofline.chart's basis
    "counters": "ncu's FLOPs and bytes per memory level",
    "time": "the model's FLOPs and compulsory bytes over the measured time",
    "predicted": "the model's attainable FLOP/s",
}
NO_LAUNCH = "no launch of this layer phase was stored (a model run, or a layer phase that launched nothing)"


def _cell(column: str, value: Any, link: str | None = None) -> dict:
    missing = value is None or units.is_missing(value)
    sort = "" if missing else (value if isinstance(value, int | float) else str(value))
    return {"text": units.cell(column, value, missing="-"), "sort": sort, "link": link}


def _columns(keys: tuple[str, ...] | list[str]) -> list[dict]:
    return [{"key": key, "header": units.header(key)} for key in keys]


def _table(records: list[dict], keys: tuple[str, ...] | list[str], links: dict | None = None) -> tuple[list, list]:
    """(columns, rows) of the keys any record fills, each cell formatted; ``links``: key -> url of a record."""
    shown = [key for key in keys if any(r.get(key) is not None and not units.is_missing(r.get(key)) for r in records)]
    links = links or {}
    rows = [{key: _cell(key, r.get(key), links[key](r) if key in links else None) for key in shown} for r in records]
    return _columns(shown), rows


def _phase_link(run_id: int) -> Any:
    return lambda r: f"/runs/{run_id}/{quote(str(r['layer']), safe='')}/{r['phase']}"


def runs(store: Store) -> dict:
    from tracker.store.queries import experiment_rows, run_summaries

    summary, experiments = run_summaries(store), experiment_rows(store)
    run_columns, run_rows = _table(summary, RUN_COLUMNS, {"run_id": lambda r: f"/runs/{r['run_id']}"})
    experiment_columns, experiment_table = _table(experiments, EXPERIMENT_COLUMNS)
    return dict(
        run_columns=run_columns, runs=run_rows, experiment_columns=experiment_columns, experiments=experiment_table
    )


def run(store: Store, run_id: int) -> dict:
    from tracker.store import find_run, layer_rows, run_dict
    from tracker.store.queries import idle_line

    info = run_dict(find_run(store, run_id))
    layers = layer_rows(store, run_id)
    layer_columns, layer_table = _table(layers, LAYER_COLUMNS, {"layer": _phase_link(run_id)})
    figure, note = _roofline(store, run_id)
    device = info["device_name"] or "no device"
    return dict(
        title=f"Run {run_id}: {info['network']}, batch {info['batch']}, {info['implementation']}, {device}",
        run_id=run_id,
        settings=f"{info['status']}; backend {info['backend']} ({info['backend_reason']}); "
        f"started {info['started_at']}",
        idle=idle_line(store, run_id),
        roofline=figure,
        roofline_note=note,
        layer_columns=layer_columns,
        layers=layer_table,
        sections=[_section(store, run_id, *section) for section in SECTIONS],
    )


def _roofline(store: Store, run_id: int) -> tuple[dict, str]:
    """The run's roofline points as a Plotly figure: one trace a memory level, hover naming the
    layer phase and its figures, a click opening the layer phase."""
    from tracker.analysis import roofline

    points, basis = roofline.chart(store, run_id)
    link = _phase_link(run_id)
    data = []
    for level, group in points.groupby("level", sort=False):
        rows = group.to_dict("records")
        data.append(
            dict(
                type="scatter",
                mode="markers",
                name=str(level),
                x=[r["intensity"] for r in rows],
                y=[r["flops_per_s"] for r in rows],
                text=[
                    f"{r['layer']} {r['phase']}: {units.cell('intensity', r['intensity'])}, "
                    f"{units.cell('flops_per_s', r['flops_per_s'])}"
                    for r in rows
                ],
                customdata=[link(r) for r in rows],
                hovertemplate="%{text}<extra>%{fullData.name}</extra>",
                marker=dict(size=10),
            )
        )
    layout = dict(
        xaxis=dict(type="log", title="arithmetic intensity (FLOP/B)"),
        yaxis=dict(type="log", title="FLOP/s"),
        hovermode="closest",
        margin=dict(t=20),
    )
    left_out = points.attrs.get("left_out", [])
    note = f"Points: {BASES.get(basis, basis)}. Click a point to open its layer phase."
    if left_out:
        named = ", ".join(f"{layer} {phase}" for layer, phase in left_out[:12])
        note += f" Left out (nothing launched, or no arithmetic): {named}."
    return dict(data=data, layout=layout), note


def _section(store: Store, run_id: int, name: str, title: str, keys: tuple[str, ...]) -> dict:
    from tracker.store.queries import view_rows, why_empty

    rows = view_rows(store, name, run_id)
    columns, table = _table(rows, ("layer", "phase", *keys), {"layer": _phase_link(run_id)})
    missing = None if rows else (why_empty(store, f"SELECT * FROM {name} WHERE run_id = {run_id}") or "no rows")
    return dict(name=name, title=title, columns=columns, rows=table, missing=missing)


def phase(store: Store, run_id: int, layer: str, phase: str) -> dict:
    from tracker.store import find_run
    from tracker.store.queries import phase_launches

    find_run(store, run_id)
    launches = phase_launches(store, run_id, layer, phase) if phase in PHASES else None
    if launches is None:
        raise StoreError(f"no layer phase {shorten(layer)} {shorten(phase)} in run {run_id}")
    keys = [key for key in (launches[0] if launches else {}) if key not in ("run_id", "layer_id", "layer", "phase")]
    columns, rows = _table(launches, keys)
    title = f"Run {run_id}: {layer} {phase}"
    return dict(title=title, run_id=run_id, launch_columns=columns, launches=rows, missing=NO_LAUNCH)


def timeline(store: Store, run_id: int) -> bytes:
    """The run's timeline as Trace Event JSON, as `tracker export RUN --format chrome` writes it."""
    from tracker.store import find_run
    from tracker.timeline import chrome, run_process

    return json.dumps(chrome([run_process(store, find_run(store, run_id).id)])).encode()


def compare(store: Store, a: int | None, b: int | None) -> dict:
    from tracker.analysis.speedup import SHOWN, basis, comparison
    from tracker.store.queries import run_summaries

    runs = run_summaries(store)
    choices = [
        dict(
            id=r["run_id"],
            label=f"{r['run_id']}: {r['network']} b{r['batch']} {r['implementation']} {r['device_name'] or ''}",
        )
        for r in runs
    ]
    found: dict = dict(choices=choices, a=a, b=b, rows=None, columns=None, error=None, header=None)
    if a is None or b is None:
        return found
    try:
        frame = comparison(store, a, b)
    except (Mismatch, StoreError) as exc:
        return found | {"error": str(exc)}
    keys = (*SHOWN, "algorithm_a", "algorithm_b")
    columns, rows = _table(frame.to_dict("records"), keys)
    return found | dict(
        columns=columns,
        rows=rows,
        header=f"run {b} against run {a}: speedup = run {a} time / run {b} time, {basis(store, a, b)}",
    )


def sql(store: Store, statement: str, reader: str | None) -> dict:
    """The answer to one read-only query, through `tracker sql`'s guard and limits; a refusal or an
    error is the page's one line."""
    from tracker.store import query, why_empty

    found: dict = dict(statement=statement, rows=None, columns=None, error=None, note=None)
    if not statement.strip():
        return found
    try:
        with query(store, statement, reader=reader) as answer:
            listed = [dict(zip(answer.columns, row)) for row in islice(answer.rows, ROWS + 1)]
            columns = list(answer.columns)
    except TrackerError as exc:
        return found | {"error": str(exc).splitlines()[0]}
    if not listed:
        why = why_empty(store, statement)
        return found | {"note": f"no rows: {why}" if why else "no rows"}
    shown_columns, rows = _table(listed[:ROWS], columns)
    note = f"the first {ROWS:,} rows (tracker sql --format csv streams them all)" if len(listed) > ROWS else None
    return found | dict(columns=shown_columns, rows=rows, note=note)


def history(store: Store, params: dict) -> dict:
    from tracker.analysis.history import ITERATION
    from tracker.analysis.history import history as figures

    network, batch = params.get("network", ""), params.get("batch", "")
    device, metric = params.get("device", ""), params.get("metric", "") or ITERATION
    found: dict = dict(network=network, batch=batch, device=device, metric=metric, rows=None, error=None)
    if not network or not batch:
        return found
    if not batch.isdigit() or len(batch) > 7:
        return found | {"error": f"batch '{shorten(batch)}' is not a whole number"}
    try:
        frame = figures(store, network, int(batch), device or None, None, metric)
    except TrackerError as exc:
        return found | {"error": str(exc)}
    rows = frame.to_dict("records")
    columns, table = _table(rows, [*frame.columns], {"run_id": lambda r: f"/runs/{r['run_id']}"})
    figure = dict(
        data=[
            dict(
                type="scatter",
                mode="lines+markers",
                x=[f"{r['run_id']} {r['commit'] or ''}" for r in rows],
                y=[r[metric] for r in rows],
                customdata=[f"/runs/{r['run_id']}" for r in rows],
            )
        ],  # fmt: skip
        layout=dict(xaxis=dict(title="run, commit", type="category"), yaxis=dict(title=metric), margin=dict(t=20)),
    )
    return found | dict(rows=table, columns=columns, figure=figure)
