"""Commands that need no database and no GPU: networks, devices, model, metrics."""

from __future__ import annotations

import click

from tracker.cli.options import WholeNumber, emit, format_option, net_kwargs, network_options
from tracker.cli.output import cell, record, to_json
from tracker.errors import TrackerError, unknown
from tracker.metrics import FAMILIES
from tracker.model import CATALOG, DTYPE_BITS, lookup, memory, predict
from tracker.model.roofline import MAX_BATCH
from tracker.nets import NETWORKS, build
from tracker.phases import PHASE_SETS
from tracker.units import header

batch_option = click.option(
    "--batch", "-b", type=WholeNumber(1, MAX_BATCH), default=1, show_default=True, help="Images per mini-batch."
)


def _device(ctx, param, value: str | None) -> str | None:
    """--device checked as it enters: a name the catalog does not know, an empty one included (it
    is not 'no device'), is refused before the command does anything."""
    if value is not None:
        lookup(value)
    return value


device_option = click.option(
    "--device",
    "-d",
    metavar="NAME",
    default=None,
    callback=_device,
    help="A catalog GPU for the roofline (h100, a100, gtx1080, 'NVIDIA H100 80GB HBM3', ...; see `tracker devices`). "
    "profile and experiment on the model backend: h100-sxm where none is named.",
)
dtype_option = click.option(
    "--dtype-bits",
    type=click.Choice([str(b) for b in DTYPE_BITS]),
    default="32",
    show_default=True,
    help="Bits per value for the byte counts (the roof stays the FP32 peak, as in paper 000).",
)
phases_option = click.option(
    "--phases",
    type=click.Choice(list(PHASE_SETS)),
    default="both",
    show_default=True,
    help="fwd, bwd (bwd_data and bwd_weight) or both.",
)


@click.command()
@click.argument("network", required=False)
@network_options
@format_option
def networks(network, fmt, **kwargs):
    """List the networks, or one network's layers with shapes and stable IDs.

    \b
    Examples:
      tracker networks
      tracker networks alexnet --format json
      tracker networks unet2d --conv-type separable --second-stride 2
    """
    options = net_kwargs(kwargs)
    if network is None:
        if any(v is not None for v in options.values()):
            raise TrackerError("network options need a network: tracker networks NAME --option ...")
        rows = []
        for name, entry in NETWORKS.items():
            net = entry.build()
            rows.append(
                {
                    "network": name,
                    "summary": entry.summary,
                    "input_shape": list(net.input_shape),
                    "layers": len(net.layers),
                    "params": net.params,
                    "grouped_convolutions": net.grouped_convolutions,
                    "options": ["--" + o.replace("_", "-") for o in entry.options],
                    "notes": net.notes,
                }
            )
        columns = None if fmt == "json" else ("network", "summary", "input_shape", "layers", "params", "options")
        emit(rows, fmt, columns)
        return
    net = build(network, **options)
    if fmt == "json":
        click.echo(to_json(net.to_dict()))
        return
    rows = [layer.to_dict() for layer in net.layers]
    emit(rows, fmt, ("layer_id", "layer", "kind", "inputs", "output_shape", "params", "phases", "attributes"))
    if fmt == "table":
        click.echo(
            f"\n{net.name}: input {cell('', list(net.input_shape))}, {len(net.layers)} layers, "
            f"{net.params:,} parameters, grouped convolutions: {'yes' if net.grouped_convolutions else 'no'}"
        )
        for note in net.notes:
            click.echo(f"  - {note}")


@click.command()
@click.argument("name", required=False)
@format_option
def devices(name, fmt):
    """List the GPU catalog, or one GPU with the source of each figure.

    \b
    Examples:
      tracker devices
      tracker devices h100 --format json
      tracker devices "NVIDIA GeForce GTX 1080"
    """
    if name is not None:  # '' is a name, and not one the catalog has
        device = lookup(name).to_dict()
        if fmt != "table":
            click.echo(to_json(device) if fmt == "json" else _csv_one(device))
            return
        for key, value in device.items():
            if key != "sources":
                click.echo(f"{header(key):>21}: {cell(key, value)}  {_source(device, key)}".rstrip())
        return
    rows = [d.to_dict() for d in CATALOG]
    columns = (
        None
        if fmt == "json"
        else (
            "device",
            "name",
            "compute_capability",
            "sm_count",
            "fp32_tflops",
            "dram_gbps",
            "l2_kib",
            "shared_kib_per_sm",
            "ridge_flop_per_byte",
        )
    )
    emit(rows, fmt, columns)
    if fmt == "table":
        click.echo("\nsources of every figure: tracker devices NAME")


def _source(device: dict, key: str) -> str:
    source = device["sources"].get(key)
    return f"[{source}]" if source else ""


def _csv_one(device: dict) -> str:
    from tracker.cli.output import to_csv

    flat = {k: v for k, v in device.items() if k != "sources"}
    flat.update({f"source_{k}": v for k, v in device["sources"].items()})
    return to_csv([flat])


MODEL_COLUMNS = ("layer_id", "layer", "kind", "phase", "output_shape", "params", "macs", "ops", "bytes", "intensity")
ROOF_COLUMNS = ("attainable_gflops", "predicted_ms", "bound")


@click.command()
@click.argument("network")
@batch_option
@device_option
@dtype_option
@phases_option
@network_options
@click.option("--memory", "show_memory", is_flag=True, help="Print the peak-memory breakdown instead of the layers.")
@click.option(
    "--plot", default=None, metavar="FILE", help="Draw the roofline (needs --device) into this PNG, SVG or PDF file."
)
@click.option(
    "--algorithm",
    default=None,
    metavar="NAME|plan|all",
    help="Cost the convolutions by one algorithm (direct, implicit_gemm, gemm, winograd_f2, winograd_f4, "
    "fft; Winograd and FFT where the stride is 1, direct elsewhere, as each row says): its multiplies, "
    "transform FLOPs and workspace move the roofline and the memory peak. 'plan': each conv phase by the "
    "algorithm tracker profile's default plan runs (as its model runs predict). 'all': every algorithm side "
    "by side per conv layer phase, the fastest on --device (else the fewest FLOPs) marked best (paper 004). "
    "Without it, each convolution's own count (its multiplies, its compulsory bytes).",
)
@format_option
def model(network, batch, device, dtype_bits, phases, show_memory, plot, algorithm, fmt, **kwargs):
    """Analytic FLOPs, bytes, arithmetic intensity, roofline and memory per layer and phase.

    Ops follow paper 003 (a multiply-add is 2 ops, bias not counted); bytes are compulsory
    traffic (each input, weight and output moved once). No GPU needed.

    \b
    Examples:
      tracker model alexnet --batch 1 --format json
      tracker model alexnet --batch 128 --device h100 --plot roofline.png
      tracker model unet2d --batch 16 --device rtx2060-super --conv-type separable
      tracker model unet3d --batch 2 --memory
      tracker model alexnet --batch 128 --device h100 --algorithm all
      tracker model alexnet --batch 128 --algorithm winograd_f4 --memory
    """
    from tracker.model.algorithms import check_algorithm

    if algorithm not in (None, "all", "plan"):
        check_algorithm(algorithm)
    net = build(network, **net_kwargs(kwargs))
    priced = _planned(net, batch, phases) if algorithm == "plan" else algorithm
    gpu = lookup(device) if device else None
    if plot is not None and gpu is None:
        raise TrackerError("--plot needs --device: the roofline is drawn against a device's roof")
    if plot is not None:  # before any output: an unwritable --plot fails in one line, not after the table
        from tracker.paths import check_file

        plot = check_file(plot, PLOT_SUFFIXES)
    bits = int(dtype_bits)
    if algorithm == "all":
        if show_memory or plot is not None:
            raise TrackerError(
                "--algorithm all compares the algorithms in one table: name one algorithm for --memory or --plot"
            )
        _algorithms(net, batch, gpu, bits, phases, fmt)
        return
    peak = memory(net, batch, bits, priced)
    if show_memory:
        emit([{"item": k, "bytes": v} for k, v in peak.to_dict().items()], fmt)
        return
    rows = predict(net, batch, gpu, bits, phases, priced)
    emit(
        [r.to_dict(with_device=gpu is not None) for r in rows],
        fmt,
        None
        if fmt == "json"
        else MODEL_COLUMNS + (ROOF_COLUMNS if gpu else ()) + (("algorithm", "workspace_bytes") if algorithm else ()),
    )
    if fmt == "table":
        _model_footer(net, batch, gpu, bits, rows, peak)
    if plot is not None and gpu is not None:  # refused above without a device
        _plot_roofline(net, batch, gpu, bits, rows, plot)
        click.echo(f"roofline written to {plot}", err=fmt != "table")


def _planned(net, batch: int, phases: str) -> dict[str, str]:
    """--algorithm plan: 'layer/phase' -> the algorithm of each conv phase tracker profile's
    default plan runs (tracker/ops/conv_rule.py)."""
    from tracker.gpu.network import algorithms, plan, plan_of

    try:
        return algorithms(net, plan_of(plan(net, {}, phases, batch, by_rule=True)), batch) or {}
    except TrackerError as exc:
        raise TrackerError(f"--algorithm plan: {exc}") from None


def _plot_roofline(net, batch: int, gpu, bits: int, rows, plot) -> None:
    """The model's roofline of ``rows`` against ``gpu``'s roof, written to ``plot``."""
    from tracker.figures import save
    from tracker.figures.roofline import model_points, roofline
    from tracker.model.roofline import Roofs

    figure = roofline(
        model_points(rows),
        Roofs.of(gpu),
        f"Roofline predicted by the model: {net.name}, batch {batch}, {bits}-bit, on {gpu.name}",
        basis="predicted",
    )
    if figure is None:
        raise TrackerError("nothing to plot: no layer phase does arithmetic")
    save(figure, plot)


PLOT_SUFFIXES = (".png", ".svg", ".pdf")
ALGORITHM_COLUMNS = (
    "layer",
    "phase",
    "algorithm",
    "multiplies",
    "transform_flops",
    "ops",
    "workspace_bytes",
    "intensity",
)


def _algorithms(net, batch, gpu, bits, phases, fmt) -> None:
    """--algorithm all: every convolution algorithm per conv layer phase, the best marked."""
    from tracker.model.roofline import compare

    rows = compare(net, batch, gpu, bits, phases)
    if not rows:
        raise TrackerError(f"{net.name} has no convolution for --algorithm all to compare")
    emit(rows, fmt, None if fmt == "json" else ALGORITHM_COLUMNS + (ROOF_COLUMNS if gpu else ()) + ("best",))
    if fmt == "table":
        basis = f"predicted time on {gpu.name} (roofline)" if gpu else "fewest FLOPs (add --device NAME for time)"
        ties = len({(r["layer"], r["phase"]) for r in rows if r["best"] == "tie"})
        click.echo(f"\nbest: {basis}; tie: several equal to the digits shown ({ties} layer phases)")
        click.echo(
            "multiplies: of each algorithm's arithmetic stage; transform FLOPs as dense matrix products "
            "(an upper bound); --format json gives each row's rule"
        )


def _model_footer(net, batch, gpu, bits, rows, peak) -> None:
    ops = sum(r.ops for r in rows)
    nbytes = sum(r.bytes for r in rows)
    line = f"\ntotal: {cell('', ops)} ops, {cell('bytes', nbytes)} compulsory traffic"
    if gpu:
        line += f", {sum(r.predicted_ms for r in rows):.4g} ms predicted on {gpu.name} (roofline, FP32 peak)"
    click.echo(line)
    click.echo(
        f"peak memory of one training step: {cell('bytes', peak.peak_bytes)} "
        f"(params {cell('bytes', peak.param_bytes)}, activations {cell('bytes', peak.activation_bytes)}; "
        "details: --memory)"
    )
    click.echo("ops: paper 003's convention (multiply-add = 2, bias not counted); each row's rule: --format json")


@click.command()
@click.argument("name", required=False)
@click.option("--family", type=click.Choice(FAMILIES), help="Only the metrics of this family.")
@format_option
def metrics(name, family, fmt):
    """List the metric catalog: what tracker collects, and what each collector (ncu, nvprof) calls it.

    Every counter in a trace database is one of these names (table metric, view launch_metrics);
    the views roll them up per layer and phase as the rollup column says, and table metric_source
    keeps the name each run's collector gave it.

    \b
    Examples:
      tracker metrics
      tracker metrics --family stall
      tracker metrics l2_hit_rate
      tracker metrics --format json
    """
    from tracker.metrics import BY_NAME, metric_def_rows
    from tracker.profilers import COLLECTORS, sources

    named = {collector: sources(collector) for collector in COLLECTORS}
    rows = [
        r | {collector: getattr(names.by_metric.get(r["name"]), "name", None) for collector, names in named.items()}
        for r in metric_def_rows()
        if family in (None, r["family"])
    ]
    if name is not None:
        if name not in BY_NAME:
            raise unknown("metric", name, list(BY_NAME))
        rows = [r for r in rows if r["name"] == name]
    if name is not None and fmt == "table":  # one metric: a row of it would be 500 characters wide
        click.echo(record(rows[0]))
        return
    columns = None if fmt == "json" or name else ("name", "family", "unit", "rollup", *COLLECTORS)
    emit(rows, fmt, columns)
