"""Commands about tracker's CUDA kernels: kernels, selftest."""

from __future__ import annotations

import click

from tracker.cli import cli
from tracker.cli.options import emit, format_option

KERNEL_COLUMNS = ("op", "phase", "variant", "l1", "kernels", "registers", "shared_bytes", "constant_bytes",
                  "spill_bytes", "global_loads", "l1_loads", "verified_on", "changed_since")


@cli.command()
@click.option("--arch", type=click.Choice(["sm_80", "sm_90"]), default="sm_90", show_default=True,
              help="GPU architecture to compile for.")
@click.option("--l1", "l1", type=click.Choice(["ca", "cg", "both"]), default="both", show_default=True,
              help="L1 policy: ca caches global loads in L1, cg bypasses it (-Xptxas -dlcm=cg, no "
                   "read-only path).")
@format_option
def kernels(arch, l1, fmt):
    """Compile every kernel variant with NVRTC (no GPU needed) and list its resources.

    Per op, phase, variant and L1 policy: the kernels it launches, registers, static shared
    memory, constant memory and spill bytes (the worst of its kernels), its global load
    instructions and how many of them go through L1 (read from the SASS: the cg build sends
    every one around L1), and the GPU that last verified it against the NumPy reference
    (tracker selftest --record), or '-' if none has.

    \b
    Examples:
      tracker kernels
      tracker kernels --arch sm_80 --l1 cg --format csv
    """
    from tracker.gpu.compile import variant_rows

    policies = ("ca", "cg") if l1 == "both" else (l1,)
    click.echo(f"compiling {arch} kernels with NVRTC ...", err=True)
    rows = variant_rows(arch, policies)
    emit(rows, fmt, None if fmt == "json" else KERNEL_COLUMNS)
    if fmt == "table":
        unverified = sum(row["verified_on"] is None for row in rows)
        click.echo(f"\n{len(rows)} variant builds, {sum(r['spill_bytes'] > 0 for r in rows)} with spills; "
                   f"{unverified} never verified on a GPU")


@cli.command()
@click.option("--batch", "-b", type=click.IntRange(1, 64), default=2, show_default=True,
              help="Images per batch for the AlexNet layer shapes.")
@click.option("--l1", "l1", type=click.Choice(["ca", "cg", "both"]), default="both", show_default=True,
              help="L1 policies to compile and check.")
@click.option("--shapes", type=click.Choice(["alexnet", "small"]), default="alexnet", show_default=True,
              help="alexnet: every AlexNet layer's shapes at --batch; small: the CPU emulation's small "
                   "cases, which reach every code path (fast; for compute-sanitizer).")
@click.option("--record", is_flag=True,
              help="Write a verification record under tests/data/verified/ (commit it).")
@format_option
def selftest(batch, l1, shapes, record, fmt):
    """Check every kernel variant against the NumPy reference on this machine's GPU.

    Fresh random inputs of every AlexNet layer's shapes at a small batch; outputs start as NaN
    so an element never written fails; relative error under 1e-5 (element-wise) or 1e-4
    (reductions, convolutions) against the float64 reference.

    \b
    Examples:
      tracker selftest
      tracker selftest --batch 4 --record
      compute-sanitizer --tool racecheck tracker selftest --shapes small --l1 ca
    """
    from tracker.gpu.runner import selftest as run_selftest
    from tracker.gpu.runner import summarize
    from tracker.ops.selftest import network_cases, small_cases
    from tracker.nets import build
    from tracker.profile import require_gpu

    require_gpu("tracker selftest")
    policies = ("ca", "cg") if l1 == "both" else (l1,)
    if record and shapes != "alexnet":
        raise click.UsageError("--record vouches for AlexNet's shapes: drop --shapes small")
    cases = small_cases() if shapes == "small" else tuple(network_cases(build("alexnet"), batch))
    results, device = run_selftest(cases, policies, lambda line: click.echo(line, err=True))
    rows = summarize(results)
    emit(rows, fmt)
    failed = [r for r in rows if not r["passed"]]
    click.echo(f"{len(rows) - len(failed)} passed, {len(failed)} failed on {device['device_name']}", err=True)
    if record:
        from tracker.gpu.verified import write_record

        click.echo(f"record written to {write_record(rows, device)}", err=True)
    if failed:
        raise SystemExit(1)
