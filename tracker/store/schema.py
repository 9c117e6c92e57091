"""The trace store's tables as a typed SQLAlchemy 2 ORM. ``schema/schema.sql`` is rendered from here.

Keys: a run has layers (run_id, layer_id); the model's predictions are per layer and
phase (run_id, layer_id, phase); every kernel launch is (run_id, invocation) in launch order and
names its layer and phase; metrics are narrow (run_id, invocation, name) -> value so that new
counters need no migration, and ``metric_def`` says what each name means. An experiment is a set
of runs recorded together (``experiment_run``: each run's arm, the comparison it belongs to, and
whether it is that comparison's baseline).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    String,
    Table,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from tracker.metrics import CATALOG
from tracker.phases import PHASES
from tracker.store.states import ARM_STATES, STATUSES


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    # Counts outgrow 32 bits (ops at batch 128), so integers are BIGINT; SQLite's INTEGER is 64-bit.
    type_annotation_map = {
        int: BigInteger().with_variant(Integer(), "sqlite"),
        dict[str, Any]: JSON,
        list[Any]: JSON,
        str: String,
        datetime: DateTime(timezone=True),
    }


class SchemaInfo(Base):
    """One row: the schema version this database was created with."""

    __tablename__ = "schema_info"
    version: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    tracker_version: Mapped[str]
    created_at: Mapped[datetime]


class Run(Base):
    """One profile of one network at one batch size: its settings, provenance and outcome."""

    __tablename__ = "run"
    __table_args__ = (CheckConstraint(_in("status", STATUSES), name="run_status"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    status: Mapped[str] = mapped_column(doc="running, complete, failed or interrupted")
    network: Mapped[str]
    network_options: Mapped[dict[str, Any]]
    batch: Mapped[int]
    phases: Mapped[str] = mapped_column(doc="fwd, bwd or both")
    dtype_bits: Mapped[int]
    variants: Mapped[dict[str, Any]] = mapped_column(doc="op -> kernel variant")
    tiles: Mapped[dict[str, Any] | None] = mapped_column(
        doc="'layer/phase' -> the GEMM tile it ran where it differs from the default: `tracker tune`'s, "
        "or the default plan's fitted to a Winograd or FFT batched GEMM's M and N ({}: every default); "
        "NULL: nothing ran (model) or recorded before schema v5"
    )
    tuned_variants: Mapped[dict[str, Any] | None] = mapped_column(
        doc="'layer/phase' -> the variant it ran where `tracker tune`'s fastest differs from the plan's "
        "(run.variants): Winograd, FFT or another GEMM ({}: the plan's everywhere); NULL: nothing ran "
        "(model) or recorded before schema v12"
    )
    l1_bypass: Mapped[bool]
    implementation: Mapped[str] = mapped_column(
        server_default="ours",
        doc="ours (tracker's kernels) or torch (PyTorch: cuDNN and cuBLAS); ours before schema v6",
    )
    loaders: Mapped[str] = mapped_column(
        server_default="async",
        doc="how our GEMM kernels fill shared memory: async (cp.async, the default build), "
        "staged (through registers: the L1-bypass build, and --staged with L1 cached) or library (--impl "
        "torch); async before schema v7",
    )
    library: Mapped[dict[str, Any] | None] = mapped_column(
        doc="the library arm's versions and settings (torch, cudnn, cublas, tf32, cudnn_benchmark); NULL for ours"
    )
    backend: Mapped[str] = mapped_column(doc="ncu, nvprof, events or model")
    backend_reason: Mapped[str]
    device_name: Mapped[str | None] = mapped_column(doc="the GPU measured, or the catalog device predicted for")
    compute_capability: Mapped[str | None]
    sm_count: Mapped[int | None]
    sm_clock_mhz: Mapped[float | None]
    mem_clock_mhz: Mapped[float | None]
    driver_version: Mapped[str | None]
    cuda_version: Mapped[str | None]
    collector_version: Mapped[str | None] = mapped_column(doc="pass 2's collector's version (its name is backend)")
    collector_settings: Mapped[dict[str, Any] | None] = mapped_column(
        doc="how pass 2's collector ran (ncu: replay_mode, cache_control, clock_control); NULL without one"
    )
    repeat: Mapped[int] = mapped_column(doc="measured iterations per launch")
    counter_iterations: Mapped[int | None] = mapped_column(
        doc="how many measured iterations pass 2 (ncu, nvprof) collected counters from: the first ones, their "
        "launches carrying the counters; NULL: the run holds no counters (model, events, or a pass 2 that "
        "failed or was interrupted). Schema v9; older runs with counters had every iteration profiled"
    )
    predicted_peak_bytes: Mapped[int | None] = mapped_column(doc="model's peak memory of one training step")
    measured_peak_bytes: Mapped[int | None] = mapped_column(doc="device memory high-water mark")
    command_line: Mapped[str]
    tracker_version: Mapped[str]
    host: Mapped[str]
    pid: Mapped[int]
    process_start: Mapped[str | None] = mapped_column(doc="start time of the process, to tell a reused pid")
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    error: Mapped[str | None] = mapped_column(Text)
    provenance: Mapped[dict[str, Any] | None] = mapped_column(
        doc="the code that made it (tracker/provenance.py): tracker's version, its commit and the kernels' "
        "newest commit, each with whether its tree had uncommitted changes; NULL before schema v16"
    )
    plan: Mapped[dict[str, Any] | None] = mapped_column(
        doc="'layer/phase' -> the variant our kernels run there (or, on the model backend, would): the conv "
        "rule's algorithm (tracker/ops/conv_rule.py), --variant's choice or `tracker tune`'s; the model "
        "predicts the algorithm it names. NULL: a library's run, a network our kernels cannot run, or "
        "recorded before schema v17"
    )


class Layer(Base):
    """A layer of the run's network with its resolved shapes (per sample) and parameter count."""

    __tablename__ = "layer"
    __table_args__ = (Index("layer_by_name", "run_id", "name", unique=True),)  # show/sql by layer name

    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), primary_key=True)
    layer_id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    name: Mapped[str]
    kind: Mapped[str]
    attributes: Mapped[dict[str, Any]]
    inputs: Mapped[list[Any]] = mapped_column(doc="names of the layers feeding it ('input': the network input)")
    input_shapes: Mapped[list[Any]]
    output_shape: Mapped[list[Any]]
    params: Mapped[int]


class Prediction(Base):
    """The analytic model's figures for a layer and phase, with the counting convention used."""

    __tablename__ = "prediction"
    __table_args__ = (
        ForeignKeyConstraint(["run_id", "layer_id"], ["layer.run_id", "layer.layer_id"], ondelete="CASCADE"),
        CheckConstraint(_in("phase", PHASES), name="prediction_phase"),
    )

    run_id: Mapped[int] = mapped_column(primary_key=True)
    layer_id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    phase: Mapped[str] = mapped_column(primary_key=True)
    macs: Mapped[int]
    ops: Mapped[int]
    bytes: Mapped[int] = mapped_column(doc="compulsory bytes at the run's dtype_bits")
    intensity: Mapped[float] = mapped_column(Float, doc="ops per byte")
    attainable_gflops: Mapped[float | None] = mapped_column(Float, doc="roofline, when a device is known")
    predicted_ms: Mapped[float | None] = mapped_column(Float)
    bound: Mapped[str | None] = mapped_column(doc="compute or memory")
    convention: Mapped[str] = mapped_column(Text, doc="what ops counts for this layer kind")


class Launch(Base):
    """One kernel launch, in invocation order, with the layer and phase it belongs to (pass 1)."""

    __tablename__ = "launch"
    __table_args__ = (
        ForeignKeyConstraint(["run_id", "layer_id"], ["layer.run_id", "layer.layer_id"], ondelete="CASCADE"),
        CheckConstraint(_in("phase", PHASES), name="launch_phase"),
        Index("launch_by_layer", "run_id", "layer_id", "phase"),  # per-layer rollups (layer_phase view)
    )

    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), primary_key=True)
    invocation: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    layer_id: Mapped[int]
    phase: Mapped[str]
    repeat: Mapped[int] = mapped_column(doc="which measured iteration, from 0")
    kernel_name: Mapped[str]
    variant: Mapped[str]
    l1_policy: Mapped[str] = mapped_column(doc="ca (cache in L1) or cg (bypass L1)")
    grid_x: Mapped[int]
    grid_y: Mapped[int]
    grid_z: Mapped[int]
    block_x: Mapped[int]
    block_y: Mapped[int]
    block_z: Mapped[int]
    shared_bytes: Mapped[int]
    registers: Mapped[int | None]
    time_ms: Mapped[float | None] = mapped_column(Float, doc="CUDA-event time")
    start_ns: Mapped[int | None] = mapped_column(
        BigInteger,
        doc="when it began on the device, in ns after the run's first launch began; NULL where the run timed "
        "durations only, and in runs recorded before schema v14",
    )
    algorithm: Mapped[str | None] = mapped_column(
        doc="its layer phase's algorithm as the phase's kernel names say (direct, implicit_gemm, "
        "implicit_precomp_gemm, gemm, winograd, winograd_nonfused, fft), ours and a library's alike; NULL where "
        "no name says (an element-wise phase) and in runs recorded before schema v6"
    )
    role: Mapped[str | None] = mapped_column(
        doc="the kernel's part in its layer phase: math, or the work around it (transform, reduction, fill, "
        "copy, offsets, epilogue, other; a library's copies and fills are logged as launches too, with no "
        "grid); NULL in runs recorded before schema v6"
    )


class MetricDefRow(Base):
    """What a metric name means, from the catalog (tracker/metrics.py): unit, meaning,
    how it rolls up over launches. What each collector calls it is ``metric_source``'s."""

    __tablename__ = "metric_def"

    name: Mapped[str] = mapped_column(primary_key=True)
    family: Mapped[str] = mapped_column(doc="time, fp, stall, issue, cache, traffic, throughput, utilization, peak")
    unit: Mapped[str]
    description: Mapped[str] = mapped_column(Text)
    rollup: Mapped[str] = mapped_column(doc="sum, max or weighted:<metric>")
    category: Mapped[str | None] = mapped_column(doc="stalls: paper 003's (nvprof's) name for the reason")


class Metric(Base):
    """One counter of one launch (pass 2), narrow."""

    __tablename__ = "metric"
    __table_args__ = (
        ForeignKeyConstraint(["run_id", "invocation"], ["launch.run_id", "launch.invocation"], ondelete="CASCADE"),
    )

    run_id: Mapped[int] = mapped_column(primary_key=True)
    invocation: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(ForeignKey("metric_def.name"), primary_key=True)
    value: Mapped[float | None] = mapped_column(Float)


class MetricSource(Base):
    """The name a run's collector gave each metric it stored (its ``backend``: ncu, nvprof), as its
    own output and documentation spell it."""

    __tablename__ = "metric_source"

    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(ForeignKey("metric_def.name"), primary_key=True)
    source: Mapped[str] = mapped_column(
        doc="the collector's name: ncu's lts__t_sector_hit_rate.pct, nvprof's l2_tex_hit_rate"
    )


class PerLayerPhase:
    """The key every per-run rollup starts with: run, layer and phase (a run's rows read by key)."""

    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), primary_key=True, sort_order=-3)
    layer_id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False, sort_order=-2)
    phase: Mapped[str] = mapped_column(primary_key=True, sort_order=-1)  # first: the key reads by run


class RollupTime(PerLayerPhase, Base):
    """Per run, layer and phase: the phase's event time per measured iteration, rolled up over the
    iterations (median, min, max, spread). Written with the launches (tracker/store/rollups.py)."""

    __tablename__ = "rollup_time"

    launches: Mapped[int] = mapped_column(doc="launches per measured iteration")
    measured_ms: Mapped[float | None] = mapped_column(Float, doc="median over measured iterations")
    min_ms: Mapped[float | None] = mapped_column(Float)
    max_ms: Mapped[float | None] = mapped_column(Float)
    repeats: Mapped[int] = mapped_column(doc="measured iterations timed")
    spread_pct: Mapped[float | None] = mapped_column(Float, doc="(max - min) / median, in %")
    algorithm: Mapped[str | None] = mapped_column(doc="the algorithm its launches ran (launch.algorithm)")


class RollupIdle(PerLayerPhase, Base):
    """Per run, layer, phase and measured iteration, where its launches have starts: the GPU idle
    before them (each launch's wait since every earlier launch of its iteration had ended; 0 where
    it overlapped one; nothing before the iteration's first), the time they ran, and when the first
    began and the last ended. Written with the launches (tracker/store/rollups.py)."""

    __tablename__ = "rollup_idle"

    repeat: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    launches: Mapped[int]
    busy_ms: Mapped[float] = mapped_column(Float, doc="the launches' durations summed")
    idle_ms: Mapped[float] = mapped_column(Float, doc="the GPU idle before each of them, summed")
    first_start_ns: Mapped[int] = mapped_column(BigInteger)
    last_end_ns: Mapped[int] = mapped_column(BigInteger)


# One row per profiled launch and a column per catalog metric (tracker/store/rollups.py). Its
# columns follow the catalog, like the counter views: a migration recreates and refills it.
rollup_launch = Table(
    "rollup_launch",
    Base.metadata,
    Column("run_id", Integer, ForeignKey("run.id", ondelete="CASCADE"), primary_key=True),
    Column("invocation", Integer, primary_key=True, autoincrement=False),
    *(Column(m.name, Float) for m in CATALOG),
    Column("flops", Float, doc="FP32 FLOPs: fadd + fmul + 2 ffma, or nvprof's total"),
    comment="Per profiled launch: every catalog metric as a column, and FP32 FLOPs (launch_metrics reads it).",
)


class RollupStall(PerLayerPhase, Base):
    """Per run, layer, phase and stall reason: its share of all stalls and its paper-003 category."""

    __tablename__ = "rollup_stall"

    name: Mapped[str] = mapped_column(primary_key=True)
    category: Mapped[str | None]
    share: Mapped[float | None] = mapped_column(Float)


class RollupStallCategory(PerLayerPhase, Base):
    """Per run, layer, phase and stall category: its share, and its place (1 dominates)."""

    __tablename__ = "rollup_stall_category"

    category: Mapped[str] = mapped_column(primary_key=True)
    share: Mapped[float | None] = mapped_column(Float)
    place: Mapped[int]


class RollupMetricRepeat(PerLayerPhase, Base):
    """Per run, layer, phase, measured iteration and metric: the metric rolled up over the phase's
    launches as its metric_def.rollup says. Written with the counters (tracker/store/rollups.py)."""

    __tablename__ = "rollup_metric_repeat"

    repeat: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(primary_key=True)
    value: Mapped[float | None] = mapped_column(Float)


class RollupMetric(PerLayerPhase, Base):
    """Per run, layer, phase and metric: the median over measured iterations, min, max and spread.
    Written with the counters (tracker/store/rollups.py)."""

    __tablename__ = "rollup_metric"
    __table_args__ = (Index("rollup_metric_by_name", "name", "run_id"),)  # one metric across runs

    name: Mapped[str] = mapped_column(primary_key=True)
    value: Mapped[float | None] = mapped_column(Float, doc="median over measured iterations")
    min_value: Mapped[float | None] = mapped_column(Float)
    max_value: Mapped[float | None] = mapped_column(Float)
    repeats: Mapped[int]
    spread_pct: Mapped[float | None] = mapped_column(Float, doc="(max - min) / |median|, in %")


class Tuning(Base):
    """One candidate GEMM schedule `tracker tune` tried for one layer phase on one GPU: the tile
    (``128x64x8/split4``), whether it matched the NumPy reference, and its median time. The plan
    runs the fastest verified tile for the GPU and shape (``tracker.tune.best``). Added by
    `tracker tune` to a database made before it (an optional table: older trackers ignore it)."""

    __tablename__ = "tuning"
    __table_args__ = (
        CheckConstraint(_in("phase", PHASES), name="tuning_phase"),
        Index("tuning_by_shape", "device_name", "op", "variant", "phase", "shape"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    device_name: Mapped[str] = mapped_column(doc="the GPU measured (CUDA's name)")
    op: Mapped[str]
    variant: Mapped[str]
    phase: Mapped[str]
    layer: Mapped[str] = mapped_column(doc="the layer whose shape this is (one of those sharing it)")
    shape: Mapped[str] = mapped_column(doc="the op's input shapes and parameters, e.g. 'w=64x3x11x11 x=128x...'")
    tile: Mapped[str] = mapped_column(doc="CTA tile m x n x k, and split-K slices (0 or none: by rule)")
    splits: Mapped[int] = mapped_column(doc="the split-K slices that ran at this shape")
    verified: Mapped[bool] = mapped_column(doc="matched the NumPy reference (at the verification batch)")
    error: Mapped[float | None] = mapped_column(Float, doc="worst relative error of the phase's outputs")
    time_ms: Mapped[float | None] = mapped_column(Float, doc="median over the repetitions, L2 flushed before each")
    spread_pct: Mapped[float | None] = mapped_column(Float, doc="(max - min) / median, in %")
    timer: Mapped[str] = mapped_column(doc="events (CUDA events) or wall (host clock: the CPU emulation)")
    tracker_version: Mapped[str]
    created_at: Mapped[datetime]


class Experiment(Base):
    """A set of runs recorded together to answer one question (tracker.experiment.KINDS), planned as
    arms (``experiment_arm``) and linked to each arm's run (``experiment_run``)."""

    __tablename__ = "experiment"
    __table_args__ = (CheckConstraint(_in("status", STATUSES), name="experiment_status"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(doc="l1-bypass, fusion, variants, batch, library or algorithms")
    status: Mapped[str] = mapped_column(doc="running, complete, failed or interrupted")
    network: Mapped[str]
    network_options: Mapped[dict[str, Any]]
    settings: Mapped[dict[str, Any]] = mapped_column(
        doc="batch(es), variants, gpus, backend, repeat, warmup, device, ncu settings, executor"
    )
    command_line: Mapped[str]
    tracker_version: Mapped[str]
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    error: Mapped[str | None] = mapped_column(Text)
    host: Mapped[str | None] = mapped_column(doc="where it ran (schema v4; NULL in older experiments)")
    pid: Mapped[int | None]
    process_start: Mapped[str | None] = mapped_column(doc="start time of the process, to tell a reused pid")


class ExperimentRun(Base):
    """One run of an experiment: its arm, the comparison it belongs to, and whether it is that
    comparison's baseline (every other run of the comparison is measured against it)."""

    __tablename__ = "experiment_run"

    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiment.id", ondelete="CASCADE"), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(doc="order in which the arms ran, from 0")
    arm: Mapped[str] = mapped_column(doc="what this run varies, e.g. 'shared cg', 'fused', 'batch 64'")
    comparison: Mapped[str] = mapped_column(doc="the runs compared with each other (e.g. one variant's ca and cg)")
    baseline: Mapped[bool]


class ExperimentArm(Base):
    """One planned arm of an experiment (schema v8): what it runs (``spec``), where and how it is
    doing. An executor (tracker/executors) queues it; the process that runs it marks it running
    with its node and pid, then complete (with its run), failed (with the reason and its log's
    tail) or interrupted. Re-running the experiment keeps the complete arms and runs the rest."""

    __tablename__ = "experiment_arm"
    __table_args__ = (CheckConstraint(_in("state", ARM_STATES), name="experiment_arm_state"),)

    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiment.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True, autoincrement=False, doc="order planned, from 0")
    label: Mapped[str] = mapped_column(doc="experiment_run.arm of its run")
    comparison: Mapped[str]
    baseline: Mapped[bool]
    spec: Mapped[dict[str, Any]] = mapped_column(
        doc="what the arm runs: arm (its label before the sweep's axes), batch, variants, l1_bypass, staged, "
        "implementation"
    )
    gpu: Mapped[str | None] = mapped_column(doc="the GPU kind asked for (--gpus); NULL: any")
    state: Mapped[str] = mapped_column(doc="queued, running, complete, failed or interrupted")
    executor: Mapped[str] = mapped_column(doc="local or slurm")
    job: Mapped[str | None] = mapped_column(doc="the engine's job id (Slurm: array job _ task)")
    attempts: Mapped[int] = mapped_column(doc="times queued: a resumed experiment queues its unfinished arms again")
    node: Mapped[str | None] = mapped_column(doc="the host it ran on")
    pid: Mapped[int | None]
    process_start: Mapped[str | None] = mapped_column(doc="start time of the process, to tell a reused pid")
    device_name: Mapped[str | None] = mapped_column(doc="the GPU measured, or the catalog device predicted for")
    run_id: Mapped[int | None] = mapped_column(
        ForeignKey("run.id", ondelete="SET NULL"), doc="its latest attempt's run"
    )
    reason: Mapped[str | None] = mapped_column(Text, doc="why it failed or was interrupted")
    log_path: Mapped[str | None] = mapped_column(doc="where the engine writes its output")
    log: Mapped[str | None] = mapped_column(Text, doc="the last lines of its output, when it ended")
    queued_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
