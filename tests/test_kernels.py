"""The compile check: every kernel variant compiles with NVRTC for sm_80 and sm_90, in both L1
policies, with the runtime's options, and none spills; the SASS proves the L1 bypass."""

import hashlib
import json

import pytest
from tile_schedules import RING, SCHEDULES

from tracker import units
from tracker.cli import cli
from tracker.gpu import verified
from tracker.gpu.compile import build, build_all, global_loads, instruction_mix, occupancy, variant_rows
from tracker.gpu.kernels import (
    ARCHS,
    CUPY_ADDS,
    KERNEL_DIR,
    L1_POLICIES,
    STAGED,
    compile_options,
    source_digests,
    source_hash,
    source_text,
)
from tracker.gpu.kernels import sources as kernel_sources
from tracker.ops import OPS, gemm

TABLE = tuple(OPS.launches())
NEW_ON_THE_H200 = ("winograd", "winograd_f4", "fft")  # the variants: first on a GPU on 2026-11-26
NOT_YET_ON_A_GPU = (
    "sigmoid",
    "upsample",
    "concat",
    "batchnorm",
    "accumulate",
    "conv3d",
    "maxpool3d",
    "convtranspose",
    "convtranspose3d",
)  # no record vouches for them yet
SOURCES = kernel_sources()


def test_the_table_covers_every_op_phase_and_variant_once():
    expected = {(op.kind, phase, v) for op in OPS for phase in op.phases for v in op.variants}
    keys = [(v.op, v.phase, v.variant) for v in TABLE]
    assert sorted(keys) == sorted(expected)


@pytest.mark.slow  # compiles kernels with NVRTC
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("policy", L1_POLICIES)
def test_every_kernel_compiles_without_spills(arch, policy):
    builds = {job[0]: b for job, b in build_all((source, arch, policy, ()) for source in SOURCES).items()}
    for variant in TABLE:
        for k in variant.kernels:
            assert k.name in builds[k.source].kernels, f"{variant.key}: no kernel {k.name} in {k.source}"
    for b in builds.values():
        for name, r in b.kernels.items():
            assert (r.spill_stores, r.spill_loads, r.stack_bytes) == (0, 0, 0), (b.source, name, r)
            assert r.shared_bytes <= 48 * 1024 and occupancy(r, arch) > 0, (b.source, name, r)


@pytest.mark.slow  # compiles kernels with NVRTC
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("source", SOURCES)
def test_the_l1_bypass_build_sends_every_global_load_around_l1(source, arch):
    """Read from the SASS (cuobjdump): under cg no load is LDG.E.CONSTANT (the read-only path,
    cached in L1 whatever -dlcm says) or SM-scoped; under ca every load is cached in L1 (a kernel
    that stages its input with cp.async may have no LDG left there; under cg it has no LDGSTS)."""
    cached, bypassed = build(source, arch, "ca"), build(source, arch, "cg")
    for name, r in bypassed.kernels.items():
        ca = cached.kernels[name]
        assert ca.global_loads + ca.cp_async > 0 and ca.l1_loads == ca.global_loads, (source, name, "ca", ca)
        assert r.cp_async == 0, (source, name, "cg", r)
        assert r.global_loads > 0 and r.l1_loads == 0, (source, name, "cg", r)


def test_load_mix_is_read_from_real_sass():
    text = """
        Function : k1
        /*0080*/  LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;
        /*0090*/  LDG.E.STRONG.SM R5, desc[UR4][R2.64] ;
        /*00a0*/  @!P0 LDG.E.STRONG.GPU R6, desc[UR4][R2.64] ;
        /*00b0*/  STG.E desc[UR4][R2.64], R6 ;
        /*00c0*/  LDGSTS.E [R7], desc[UR4][R2.64] ;
        /*00d0*/  LDGDEPBAR ;
        Function : k2
        /*0010*/  LDS R1, [R2] ;
    """
    assert global_loads(text) == {"k1": {"global_loads": 3, "l1_loads": 2}, "k2": {"global_loads": 0, "l1_loads": 0}}


GEMM_KERNELS = sorted(
    {(k.source, k.name) for v in TABLE if v.tunable for k in v.kernels if k.name.startswith(("gemm_", "conv2d_"))}
)


@pytest.fixture(scope="module")
def schedule_builds():
    """The sm_90 builds of every schedule class's GEMM modules (tests/tile_schedules.py), compiled all at once."""
    return build_all((source, "sm_90", "ca", tile.overrides) for tile in SCHEDULES for source, _ in GEMM_KERNELS)


# The kernels with a dense operand whose outer index walks memory (common.cuh's in_runs): copied
# with 16-byte cp.async. Every other operand is k-contiguous or gathered: 4-byte copies.
IN_RUNS = ("gemm_nn", "gemm_nn_batched", "gemm_tn", "gemm_tn_images")


@pytest.mark.slow  # compiles kernels with NVRTC
@pytest.mark.parametrize("tile", SCHEDULES, ids=lambda t: t.label)
def test_the_gemm_core_issues_at_least_8_ffma_per_shared_load_in_every_schedule(schedule_builds, tile):
    """Read from the sm_90 SASS of every GEMM-shaped kernel, for every schedule class `tracker tune` can
    run: the k-loop's FFMA per LDS (the old 64 x 64 core with 4 x 4 scalar blocks issued 2), its
    fragments loaded as 128-bit LDS, its operands copied to shared memory with cp.async (16 bytes
    a copy where an operand's rows allow: LDGSTS.128), its epilogue's 128-bit stores, no spills,
    and at least one CTA fits on an SM."""
    for source, name in GEMM_KERNELS:
        r = schedule_builds[source, "sm_90", "ca", tile.overrides].kernels[name]
        assert r.ffma_per_lds is not None and r.ffma_per_lds >= 8, (tile.label, name, r)
        assert r.wide_loads > 0 and r.cp_async > 0 and (r.spill_stores, r.spill_loads) == (0, 0), (tile.label, name, r)
        assert r.block_threads == tile.threads and occupancy(r, "sm_90") > 0, (tile.label, name, r)
        assert r.wide_stores > 0 and (r.wide_copies > 0) == (name in IN_RUNS), (tile.label, name, r)


@pytest.mark.slow  # compiles kernels with NVRTC
def test_the_fused_backward_copies_dy_and_the_relu_output_with_cp_async():
    """The fused backward's GEMM applies the ReLU mask in shared memory. Read from the
    sm_90 SASS of the RELU_MASK build each fused backward launch runs (its table entry's -D): no
    global load through registers (no LDG), and more cp.async (LDGSTS) than the unmasked build of
    the same kernel: the ReLU output's own copies, into a ring beside the operand's."""
    fused = [v for v in TABLE if v.defines]
    assert {(v.op, v.phase, v.variant) for v in fused} == {
        (op, phase, "fused") for op in ("conv", "linear") for phase in ("bwd_data", "bwd_weight")
    }
    for v in fused:
        k = v.kernels[0]
        masked = build(k.source, "sm_90", "ca", v.defines).kernels[k.name]
        plain = build(k.source, "sm_90", "ca").kernels[k.name]
        assert masked.global_loads == 0 and masked.cp_async > plain.cp_async > 0, (v.key, masked, plain)
        assert masked.shared_bytes == gemm.DEFAULT.masked_shared_bytes > plain.shared_bytes, v.key


@pytest.mark.slow  # compiles kernels with NVRTC
def test_the_staged_build_is_the_l1_bypass_builds_code_with_l1_cached():
    """The l1-bypass experiment's like-for-like arm, read from the sm_90 SASS: a 4-byte cp.async is
    LDGSTS.E whatever -dlcm says (only the 16-byte .cg form bypasses L1), so the cg build stages
    its GEMM operands through registers; the staged build does the same (no LDGSTS, as many global
    loads as the cg build's) with every load cached in L1."""
    for source in ("conv2d.cu", "gemm.cu"):
        staged, bypassed = build(source, "sm_90", STAGED), build(source, "sm_90", "cg")
        for name, r in staged.kernels.items():
            cg = bypassed.kernels[name]
            assert r.cp_async == 0 and r.global_loads == cg.global_loads, (source, name, r, cg)
            assert r.l1_loads == r.global_loads and cg.l1_loads == 0, (source, name, r, cg)
        assert any(r.global_loads > 0 for r in staged.kernels.values())


# Every GEMM core's k-loop: the 2-D ones above and the 3-D implicit convolutions.
CORES = sorted(
    {
        (k.source, k.name)
        for v in TABLE
        if v.tunable
        for k in v.kernels
        if k.name.startswith(("gemm_", "conv2d_", "conv3d_"))
    }
)


@pytest.mark.slow  # compiles kernels with NVRTC
@pytest.mark.parametrize("source, name", CORES, ids=[n for _, n in CORES])
def test_the_gemm_cores_k_loop_is_at_least_80_percent_ffma(source, name):
    """Read from the default tile's sm_90 SASS: FFMA's share of the k-loop's instructions (what
    CUTLASS's SIMT sgemm issues at 71 % of active cycles on an H200). The implicit convolutions
    test a slot's padding with one AND of tap bits and carry their k digits without division
    (common.cuh); the partial k-tile comes first, so the k-loop tests no k bound."""
    r = build(source, "sm_90", "ca").kernels[name]
    assert r.ffma_share is not None and r.ffma_share >= 0.8, r


@pytest.mark.slow  # compiles kernels with NVRTC
def test_two_ctas_per_sm_cap_a_256_thread_tile_at_128_registers():
    """min_ctas 2 (`/ctas2`): __launch_bounds__ holds every GEMM kernel of the default tile shape to
    128 registers, so that two CTAs share an SM (occupancy 25 %) whatever ptxas would choose."""
    job = ("sm_90", "ca", gemm.Tile(min_ctas=2).overrides)
    builds = build_all((source, *job) for source, _ in GEMM_KERNELS)
    for source, name in GEMM_KERNELS:
        r = builds[source, *job].kernels[name]
        assert r.registers <= 128 and occupancy(r, "sm_90") == 0.25, (name, r)


def test_the_instruction_mix_is_read_from_the_main_loop():
    text = """
        Function : k
        /*0000*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0010*/                   LDS R8, [R1] ;
        /*0020*/                   LDS.128 R8, [R1] ;
        /*0030*/                   FFMA R9, R8, R8, R9 ;
        /*0040*/                   FFMA R10, R8, R8, R10 ;
        /*0050*/               @P0 BRA 0x20 ;
        /*0058*/                   @!PT LDS RZ, [RZ] ;
        /*0060*/                   LDGSTS.E.128.ZFILL [R1], desc[UR4][R2.64], !PT ;
        /*0070*/                   FFMA R9, R8, R8, R9 ;
        /*0080*/                   STG.E.128 desc[UR4][R2.64], R8 ;
        /*0090*/                   STG.E desc[UR4][R2.64], R8 ;
        /*00a0*/                   EXIT ;
    """
    assert instruction_mix(text) == {
        "k": {
            "ffma_per_lds": 2.0,
            "ffma_share": 0.5,
            "wide_loads": 0.667,
            "cp_async": 1,
            "wide_copies": 1,
            "wide_stores": 1,
        }
    }


def test_the_compile_check_uses_the_options_and_text_that_run():
    assert "-dlcm=cg" in compile_options("cg") and "-dlcm=ca" in compile_options("ca")
    assert "-DTRACKER_L1_BYPASS" in compile_options("cg") and "-DTRACKER_L1_BYPASS" not in compile_options("ca")
    assert CUPY_ADDS == ("-ftz=true",)  # cupy/cuda/compiler.py appends it to every RawModule's options
    # CuPy's disk cache keys on the source text: the header's hash is part of it
    header = hashlib.sha256((KERNEL_DIR / "common.cuh").read_bytes()).hexdigest()[:16]
    assert f"// common.cuh: sha256 {header}; -DCONSTANT_FLOATS=16384 " in source_text("relu.cu")


@pytest.mark.slow  # compiles kernels with NVRTC
def test_only_the_constant_variant_uses_constant_memory():
    rows = variant_rows("sm_90", ("ca",))
    for row in rows:
        uses = row["variant"] == "constant" and row["phase"] != "bwd_weight"
        assert (row["constant_bytes"] == 64 * 1024) == uses, row


@pytest.mark.slow  # compiles kernels with NVRTC
def test_kernels_command_lists_the_variant_matrix(runner):
    result = runner.invoke(cli, ["kernels", "--arch", "sm_80", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert len(rows) == 2 * len(TABLE) == 192
    assert {r["l1"] for r in rows} == {"ca", "cg"}
    # The newest committed record (tests/data/verified/2026-11-26-nvidia-h200.json): every variant
    # passed on an H200, the Winograd and FFT too; a kernel changed since keeps that GPU,
    # flagged changed_since.
    recorded = [r for r in rows if r["op"] not in NOT_YET_ON_A_GPU]
    assert {r["verified_on"] for r in recorded} == {"NVIDIA H200"}
    assert {r["verified_on"] for r in rows if r not in recorded} == {None}
    # since the H200: common.cuh, which every kernel includes, counts split-K slices from K for the
    # batched GEMM, so every variant it verified is flagged until a GPU records them again.
    # That record kept one digest of all a variant's sources: the row gives it, then and now.
    h200 = [r for r in verified.records() if r["gpu"] == "NVIDIA H200"][-1]["variants"]
    for row in recorded:
        key = f"{row['op']}/{row['phase']}/{row['variant']}"
        now = source_hash(next(v for v in TABLE if v.key == key).sources)
        assert row["changed_since"] == f"source {h200[key]['source_hash'][:7]} -> {now[:7]}", row


@pytest.mark.slow  # compiles kernels with NVRTC (seconds where the build cache holds them)
def test_the_kernels_table_fits_a_screen_and_explains_changed_since(runner):
    """The table shows the columns a reader needs first, under 160 characters; --wide and csv show
    every column; a footer says what changed_since compares."""
    narrow = runner.invoke(cli, ["kernels", "--arch", "sm_90", "--l1", "ca"])
    assert narrow.exit_code == 0, narrow.output
    table = narrow.stdout.split("\n\n")[0].splitlines()
    assert table[0].split() == [
        "op",
        "phase",
        "variant",
        "l1",
        "registers",
        "occupancy",
        "shared",
        "(bytes)",
        "spill",
        "(bytes)",
        "verified",
        "on",
        "changed",
        "since",
    ]
    assert len(table) == 2 + len(TABLE) and max(map(len, table)) < 160
    assert "47 changed since their verification" in narrow.stdout  # the H200's 47 verified variants
    assert "changed since: what changed in a variant's sources" in narrow.stdout
    wide = runner.invoke(cli, ["kernels", "--arch", "sm_90", "--l1", "ca", "--wide"])
    assert {"kernels", "ffma", "lds", "cp", "async", "note"} <= set(wide.stdout.splitlines()[0].split())
    csv = runner.invoke(cli, ["kernels", "--arch", "sm_90", "--l1", "ca", "--format", "csv"])
    columns = csv.stdout.splitlines()[0].split(",")  # every column, named as the wide table's headers say
    assert " ".join(units.header(c) for c in columns).split() == wide.stdout.splitlines()[0].split()
    assert "compiling sm_90 kernels" not in csv.stdout  # progress goes to stderr: stdout stays CSV


@pytest.mark.slow  # compiles a kernel module with NVRTC
def test_build_all_reports_each_module_it_compiles_and_none_the_cache_held(tmp_path, monkeypatch):
    from tracker.gpu import compile as compiler

    monkeypatch.setenv("TRACKER_BUILD_CACHE", str(tmp_path))
    compiler._build.cache_clear()  # this process's builds of the default cache's
    heard = []
    job = ("relu.cu", "sm_90", "ca", ())

    def progress(*args):
        heard.append(args)

    assert not compiler.is_kept(job)
    compiler.build_all([job, job], progress)
    assert [(j, done, total) for j, done, total, _ in heard] == [(job, 1, 1)] and heard[0][3] > 0
    assert compiler.is_kept(job)
    compiler._build.cache_clear()
    compiler.build_all([job], progress)  # read from the build cache: nothing compiled, nothing said
    assert len(heard) == 1


@pytest.mark.slow  # compiles kernels with NVRTC
def test_kernels_command_builds_a_tuned_tile(runner):
    """--tile builds the GEMM-shaped variants with that tile (its rings in shared memory), which no
    record vouches for; the others keep the default build. A label that is no tile, or a tile the
    core cannot build, is a one-line usage error."""
    result = runner.invoke(cli, ["kernels", "--l1", "ca", "--tile", RING.label, "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {(r["op"], r["phase"], r["variant"]): r for r in json.loads(result.stdout)}
    for key, row in rows.items():
        launch = next(v for v in TABLE if (v.op, v.phase, v.variant) == key)
        ring = RING.masked_shared_bytes if launch.defines else RING.shared_bytes  # the fused backward's mask ring
        assert (row["shared_bytes"] == ring) == launch.tunable, key
        assert (row["verified_on"] is None) == (launch.tunable or launch.op in NOT_YET_ON_A_GPU), key
    big = "128x128x16"  # fits, but not beside the fused backward's mask ring: those rows are left out
    result = runner.invoke(cli, ["kernels", "--l1", "ca", "--tile", big, "--format", "json"])
    assert result.exit_code == 0, result.output
    left_out = {(v.op, v.phase, v.variant) for v in TABLE} - {
        (r["op"], r["phase"], r["variant"]) for r in json.loads(result.stdout)
    }
    assert left_out == {(v.op, v.phase, v.variant) for v in TABLE if v.defines}
    assert "the fused backward is left out: 128x128x16" in result.stderr
    for label, why in (
        ("64x64x8/ring3", "'ring3' is not stagesN"),
        ("12x", "the tile shape is MxNxK"),
        ("128x128x16/stages4", "73,728 of at most 49,152 bytes"),
    ):
        result = runner.invoke(cli, ["kernels", "--tile", label])
        assert result.exit_code == 2 and why in result.output and result.output.strip().count("\n") == 0, result.output
    # selftest takes the same --tile (for compute-sanitizer on a ring), but a record vouches for defaults
    result = runner.invoke(cli, ["selftest", "--record", "--tile", RING.label])
    assert result.exit_code == 2 and "drop --tile" in result.output and result.output.strip().count("\n") == 0


@pytest.mark.parametrize("gpu, left_out", [("NVIDIA H100 80GB HBM3", NEW_ON_THE_H200), ("NVIDIA H200", ())])
def test_the_committed_records_vouch_for_every_variant_with_small_errors(gpu, left_out):
    """The H100's last record predates the Winograd and FFT variants; the H200's (2026-11-26)
    holds every variant, both L1 policies."""
    record = [r for r in verified.records() if r["gpu"] == gpu][-1]
    assert set(record["variants"]) == {
        v.key for v in TABLE if v.variant not in left_out and v.op not in NOT_YET_ON_A_GPU
    }
    for key, entry in record["variants"].items():
        assert entry["passed"] and set(entry["errors"]) == {"ca", "cg"}, key
        assert max(entry["errors"].values()) < 1e-4, key


def test_verification_status_says_what_changed_in_the_sources(tmp_path):
    variant = next(v for v in TABLE if v.key == "relu/fwd/global")
    now = source_hash(variant.sources)
    record = {
        "gpu": "NVIDIA H100 80GB HBM3",
        "date": "2026-11-22",
        "variants": {variant.key: {"source_hash": now, "passed": True}},
    }
    (tmp_path / "a.json").write_text(json.dumps(record))
    unchanged = verified.status(variant, verified.records(tmp_path))
    assert (unchanged.gpu, unchanged.changes()) == ("NVIDIA H100 80GB HBM3", "no")
    # a record that kept one digest of every source: that digest, then and now
    record["variants"][variant.key]["source_hash"] = "0123456789abcdef"
    (tmp_path / "a.json").write_text(json.dumps(record))
    assert verified.status(variant, verified.records(tmp_path)).changes() == f"source 0123456 -> {now[:7]}"
    # one that kept each file's: the files that differ
    record["variants"][variant.key]["sources"] = source_digests(variant.sources) | {"common.cuh": "0" * 16}
    (tmp_path / "a.json").write_text(json.dumps(record))
    assert verified.status(variant, verified.records(tmp_path)).changes() == "common.cuh"
    other = next(v for v in TABLE if v.key == "lrn/fwd/shared")
    assert verified.status(other, verified.records(tmp_path)) is None


def test_a_record_keeps_each_sources_digest(tmp_path):
    """write_record keeps every file's digest beside the whole one, so a later change names its files."""
    relu = next(v for v in TABLE if v.key == "relu/fwd/global")
    rows = [
        {
            "op": "relu",
            "variant": "global",
            "phase": "fwd",
            "l1": l1,
            "layer": "relu1",
            "error": 1e-7,
            "max_error": 1e-7,
            "mean_error": 1e-8,
            "passed": True,
        }
        for l1 in ("ca", "cg")
    ]
    path = verified.write_record(
        rows, {"device_name": "NVIDIA H200", "driver_version": "1", "cuda_version": "13"}, tmp_path
    )
    entry = json.loads(path.read_text())["variants"]["relu/fwd/global"]
    assert entry["source_hash"] == source_hash(relu.sources)
    assert set(entry["sources"]) == {"common.cuh", "relu.cu", "-D sizes"}
    assert verified.status(relu, verified.records(tmp_path)).changes() == "no"


def test_a_cuobjdump_without_nvdisasm_names_the_extra_to_install(tmp_path, monkeypatch):
    """cuobjdump -sass hands the disassembly to nvdisasm; a missing one names the compile extra, which has it."""
    from tracker.errors import TrackerError
    from tracker.gpu.compile import sass

    fake = tmp_path / "cuobjdump"  # as NVIDIA's own prints it, found on PATH before the pip package
    fake.write_text("#!/bin/sh\necho \"cuobjdump fatal   : Could not find executable file 'nvdisasm'\" >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    with pytest.raises(TrackerError, match=r"needs nvdisasm .*: pip install -e '\.\[compile\]'$"):
        sass(b"\0" * 16)


@pytest.mark.slow  # compiles a kernel module with NVRTC
def test_a_build_is_kept_by_content_and_read_back_without_compiling(tmp_path, monkeypatch):
    """The second process to ask for a build reads it from $TRACKER_BUILD_CACHE; a changed -D size
    is another build; a damaged entry is compiled again; 'off' keeps nothing."""
    from tracker.gpu import compile as compiler

    monkeypatch.setenv("TRACKER_BUILD_CACHE", str(tmp_path))
    compiler._build.cache_clear()  # this process's own memo stands for the first process
    first = compiler.build("relu.cu", "sm_90", "ca")
    kept = list(tmp_path.glob("*.json"))
    assert len(kept) == 1
    compiler._build.cache_clear()
    real = compiler._compile
    monkeypatch.setattr(compiler, "_compile", lambda *a: pytest.fail("compiled what was kept"))
    assert compiler.build("relu.cu", "sm_90", "ca") == first
    kept[0].write_text("{not json")
    compiler._build.cache_clear()
    monkeypatch.setattr(compiler, "_compile", real)
    assert compiler.build("relu.cu", "sm_90", "ca") == first and json.loads(kept[0].read_text())["source"] == "relu.cu"
    compiler._build.cache_clear()
    compiler.build("gemm.cu", "sm_90", "ca", (("STAGES", 3),))
    assert len(list(tmp_path.glob("*.json"))) == 2
    monkeypatch.setenv("TRACKER_BUILD_CACHE", "off")
    compiler._build.cache_clear()
    assert compiler.cache_dir() is None and compiler.build("relu.cu", "sm_90", "cg").l1_policy == "cg"
    assert len(list(tmp_path.glob("*.json"))) == 2
    compiler._build.cache_clear()
