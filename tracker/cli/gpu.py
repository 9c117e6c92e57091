"""Commands about tracker's CUDA kernels: kernels, selftest."""

from __future__ import annotations

import click

from tracker.cli.options import WholeNumber, db_option, emit, format_option, net_kwargs, network_options
from tracker.implementations import PROFILED
from tracker.nets import build

# What a reader needs first (whether a variant fits, spills, and can be trusted); --wide adds the rest.
KERNEL_COLUMNS = (
    "op",
    "phase",
    "variant",
    "l1",
    "registers",
    "occupancy",
    "shared_bytes",
    "spill_bytes",
    "verified_on",
    "changed_since",
)
WIDE_KERNEL_COLUMNS = (
    "op",
    "phase",
    "variant",
    "l1",
    "kernels",
    "registers",
    "occupancy",
    "shared_bytes",
    "constant_bytes",
    "spill_bytes",
    "stack_bytes",
    "global_loads",
    "l1_loads",
    "ffma_per_lds",
    "wide_loads",
    "cp_async",
    "wide_copies",
    "wide_stores",
    "verified_on",
    "changed_since",
    "note",
)
CHANGED_SINCE = (
    "changed since: what changed in a variant's sources (its .cu files, common.cuh, the -D sizes\n"
    "they read) since the GPU in 'verified on' checked it; 'no': that GPU checked the build listed here"
)


def _tile(label: str | None):
    """--tile's label as a Tile that common.cuh compiles, or a one-line usage error."""
    if label is None:
        return None
    from tracker.errors import TrackerError
    from tracker.ops.gemm import Tile

    try:
        tile = Tile.parse(label)
    except ValueError as exc:
        raise click.BadParameter(f"{exc} (a tile label is like 128x64x8/stages3/split4)") from None
    try:
        return tile.check()
    except TrackerError as exc:
        raise click.BadParameter(str(exc)) from None


def tile_option(what: str):
    """--tile: a GEMM tile, as `tracker tune` names it, for the GEMM-shaped variants."""
    return click.option(
        "--tile",
        "tile",
        default=None,
        metavar="LABEL",
        callback=lambda ctx, param, value: _tile(value),
        help=f"{what} the GEMM-shaped variants with this tile, as `tracker tune` names it "
        "(e.g. 128x128x8/stages3, 64x64x8/warp8x4); default: the default tile.",
    )


@click.command()
@click.option(
    "--arch",
    type=click.Choice(["sm_80", "sm_90"]),
    default="sm_90",
    show_default=True,
    help="GPU architecture to compile for.",
)
@click.option(
    "--l1",
    "l1",
    type=click.Choice(["ca", "cg", "both"]),
    default="both",
    show_default=True,
    help="L1 policy: ca caches global loads in L1, cg bypasses it (-Xptxas -dlcm=cg, no read-only path).",
)
@tile_option("Build")
@click.option("--wide", is_flag=True, help="Show every column in the table (csv and json always hold them all).")
@format_option
def kernels(arch, l1, tile, wide, fmt):
    """Compile every kernel variant with NVRTC (no GPU needed) and list its resources.

    Per op, phase, variant and L1 policy: the kernels it launches, registers, theoretical
    occupancy (of its main kernel), static shared memory, constant memory and spill bytes (the
    worst of its kernels), its global load instructions and how many go through L1 (the cg build
    sends every one around L1), the GPU that last verified it against the NumPy reference
    (tracker selftest --record), or '-' if none has, and what changed since (changed_since):
    'no', the files whose digest differs from the record's, or for a record that kept only one
    digest of them all, that digest then and now. Read from the SASS (cuobjdump, no GPU):
    ffma_per_lds, FFMA per shared-memory load in the main loop (the GEMM core's measure of
    register reuse; '-' without shared loads there), wide_loads, the share of global and shared
    loads that are 128-bit, cp_async, LDGSTS instructions, wide_copies, those that copy 16
    bytes, and wide_stores, 128-bit global stores. The table shows the main columns;
    --wide, --format csv and --format json show them all.

    With --tile, the GEMM-shaped variants are built with that tile (what a tuned profile runs:
    deeper rings, for instance, may cost registers and so occupancy); a verification record
    vouches for the default tile's build only, so theirs read '-'. The fused backward copies the
    ReLU's output into a ring beside the masked operand's; where that does not fit, it is left out.

    \b
    Examples:
      tracker kernels
      tracker kernels --l1 ca --wide
      tracker kernels --arch sm_80 --l1 cg --format csv
      tracker kernels --l1 ca --tile 128x128x8/stages3
    """
    from tracker.gpu.compile import cache_dir, variant_rows

    policies = ("ca", "cg") if l1 == "both" else (l1,)
    kept = f"builds kept in {cache_dir()}" if cache_dir() else "no build cache"
    click.echo(f"compiling {arch} kernels with NVRTC, a line per module not built before ({kept}) ...", err=True)
    rows = variant_rows(arch, policies, tile, _compiled)
    emit(rows, fmt, None if fmt == "json" else KERNEL_COLUMNS if fmt == "table" and not wide else WIDE_KERNEL_COLUMNS)
    if tile is not None and not tile.fits(masked=True):
        click.echo(
            f"the fused backward is left out: {tile.label} with its ReLU mask ring needs "
            f"{tile.masked_shared_bytes:,} bytes of shared memory, more than a CTA's static share",
            err=True,
        )
    if fmt == "table":
        unverified = sum(row["verified_on"] is None for row in rows)
        changed = sum(row["changed_since"] not in (None, "no") for row in rows)
        click.echo(
            f"\n{len(rows)} variant builds, {sum(r['spill_bytes'] > 0 for r in rows)} with spills; "
            f"{unverified} never verified on a GPU, {changed} changed since their verification"
        )
        click.echo(CHANGED_SINCE)


def _compiled(job, done: int, total: int, seconds: float) -> None:
    """A progress line per kernel module compiled (not per one the build cache held), on stderr."""
    source, arch, policy, overrides = job
    sizes = "".join(f" {name}={value}" for name, value in overrides)
    click.echo(f"[{done}/{total}] {source} {arch} {policy}{sizes}: {seconds:.1f} s", err=True)


@click.command()
@click.option(
    "--batch",
    "-b",
    type=WholeNumber(1, 64),
    default=2,
    show_default=True,
    help="Images per batch for the AlexNet layer shapes.",
)
@click.option(
    "--l1",
    "l1",
    type=click.Choice(["ca", "cg", "both"]),
    default="both",
    show_default=True,
    help="L1 policies to compile and check.",
)
@click.option(
    "--shapes",
    type=click.Choice(["alexnet", "small"]),
    default="alexnet",
    show_default=True,
    help="alexnet: every AlexNet layer's shapes at --batch; small: the CPU emulation's small "
    "cases, which reach every code path (fast; for compute-sanitizer).",
)
@click.option("--record", is_flag=True, help="Write a verification record under tests/data/verified/ (commit it).")
@tile_option("Check")
@click.option(
    "--impl",
    "implementation",
    type=click.Choice(PROFILED),
    default="ours",
    show_default=True,
    help="ours: our kernel variants, on this machine's GPU. torch: every layer phase as PyTorch runs it "
    "in `tracker profile --impl torch` (fp32, TF32 off; backward split into bwd_weight and bwd_data by "
    "autograd.grad), through the same checks, inputs and bounds; on PyTorch's GPU if it sees one, else "
    "on the CPU.",
)
@format_option
def selftest(batch, l1, shapes, record, tile, implementation, fmt):
    """Check every kernel variant against the NumPy reference on this machine's GPU.

    Fresh random inputs of every AlexNet layer's shapes at a small batch; outputs start as NaN
    so an element never written fails; relative error under 1e-5 (element-wise) or 1e-4
    (reductions, convolutions) against the float64 reference.

    With --impl torch the same checks hold PyTorch (cuDNN, cuBLAS) to our kernels' bounds, layer
    phase by layer phase (variant `torch`): which phase loses digits, where a whole training
    step only shows the compounded error. It needs no CuPy, and runs on the CPU where PyTorch
    sees no GPU.

    \b
    Examples:
      tracker selftest
      tracker selftest --batch 4 --record
      tracker selftest --impl torch --batch 2 --format csv
      compute-sanitizer --tool racecheck tracker selftest --shapes small --l1 ca
      compute-sanitizer --tool racecheck tracker selftest --shapes small --l1 ca --tile 128x128x8/stages3
    """
    from tracker.implementations import implementation as implemented_by
    from tracker.nets import build
    from tracker.ops.selftest import network_cases, small_cases

    runs = implemented_by(implementation)
    refused = runs.refused_in_selftest(record, tile, l1)
    if refused:
        raise click.UsageError(refused)
    if record and shapes != "alexnet":
        raise click.UsageError("--record vouches for AlexNet's shapes: drop --shapes small")
    if record and tile is not None:
        raise click.UsageError("--record vouches for the default tile's builds: drop --tile")
    cases = small_cases() if shapes == "small" else tuple(network_cases(build("alexnet"), batch))
    echo = lambda line: click.echo(line, err=True)  # noqa: E731
    rows, device, info = runs.selftest(cases, l1, tile, echo)
    failed = _report(rows, device, fmt, echo)
    if record and info is not None:
        from tracker.gpu.verified import write_record

        echo(f"record written to {write_record(rows, info)}")
    if failed:
        raise SystemExit(1)


def _report(rows: list[dict], device: str, fmt: str, echo) -> int:
    """The results' table, each failure by layer, phase and output, and the summary line; how many failed."""
    emit(rows, fmt)
    failed = [r for r in rows if not r["passed"]]
    for row in failed:
        echo(
            f"failed: {row['layer']} {row['phase']} {row['output']} ({row['variant']}{_l1(row)}): error "
            f"{_error(row['error'])}, bound {row['tolerance']:.0e}"
        )
    echo(f"{len(rows) - len(failed)} passed, {len(failed)} failed on {device}")
    return len(failed)


def _l1(row: dict) -> str:
    return f", l1 {row['l1']}" if row["l1"] else ""


def _error(value) -> str:
    return "never written" if value is None else f"{value:.2e}"


TUNE_COLUMNS = ("layer", "phase", "variant", "shape", "best", "best_ms", "default_ms", "speedup", "tried", "runs")


@click.command()
@click.argument("network")
@click.option(
    "--batch",
    "-b",
    type=WholeNumber(1, 1024),
    default=128,
    show_default=True,
    help="Images per mini-batch: the shapes timed.",
)
@db_option
@click.option(
    "--variant",
    default=None,
    metavar="V|OP=V,...",
    help="Variants whose GEMM launches to tune (as tracker profile); an op not named races every "
    "algorithm that can run each layer phase (conv: implicit and explicit GEMM, direct, Winograd, FFT).",
)
@click.option(
    "--reps",
    type=WholeNumber(1, 100),
    default=5,
    show_default=True,
    help="Timed repetitions per candidate (median; L2 flushed before each).",
)
@click.option(
    "--verify-batch",
    type=WholeNumber(1, 16),
    default=2,
    show_default=True,
    help="Batch at which each candidate is checked against the NumPy reference.",
)
@click.option(
    "--quick",
    is_flag=True,
    help="Try the default tile shape with each split-K count (and the fastest's neighbours) only.",
)
@click.option(
    "--budget",
    type=WholeNumber(0, None),
    default=0,
    metavar="SECONDS",
    help="Start no candidate after this many seconds; what was measured is stored and used (0: no limit).",
)
@network_options
@format_option
def tune(network, batch, db, variant, reps, verify_batch, quick, budget, fmt, **kwargs):
    """Search algorithms and GEMM schedules per layer phase on this GPU, store them, and run the fastest.

    For every layer phase built on the tiled GEMM (conv shared/fused/gemm/winograd/winograd_f4/fft,
    linear shared/fused), and for each variant that may run it (unless --variant chose the op's:
    a conv layer phase races the implicit GEMM, the direct convolutions, the explicit GEMM,
    Winograd F(2x2) and F(4x4) and FFT, the last three at stride 1 only), each
    candidate tile (CTA tile, k-tile, split-K slices; a launch not on the tiled GEMM runs once),
    then the fastest one's neighbours (its other pipeline depths, warp layout and register
    policy), is compiled through the registry's -D sizes, checked against the NumPy reference at
    --verify-batch (each variant within its own bound, the selftest's), and timed at --batch with
    CUDA events. Every candidate and its time is stored in the trace database's tuning table; from
    then on tracker profile on this GPU runs the fastest verified variant and tile of each layer
    phase, and records both in the run (tracker profile --untuned runs each op's default variant and
    the default tiles). The table shows each variant's fastest in this search (best) and what
    profile now runs there (runs: variant and tile, the fastest in the database, perhaps an
    earlier search's; untimed, the tile the plan fits to a Winograd or FFT GEMM's shape).

    \b
    Examples:
      tracker tune alexnet --batch 128
      tracker tune alexnet --batch 128 --variant conv=fused --quick --format json
      tracker tune alexnet --batch 128 --budget 300
      tracker sql "SELECT layer, phase, tile, time_ms FROM tuning WHERE verified ORDER BY time_ms"
    """
    from tracker.ops import OPS
    from tracker.profile import require_gpu

    net = build(network, **net_kwargs(kwargs))
    chosen = OPS.parse_variants(variant)
    require_gpu("tracker tune")
    from tracker.tune import run as run_tune

    rows = run_tune(db, net, batch, chosen, reps, verify_batch, quick, lambda line: click.echo(line, err=True), budget)
    emit(rows, fmt, None if fmt == "json" else TUNE_COLUMNS)
