-- tracker trace store, schema v17: tables
-- Rendered from tracker/store/schema.py by `python -m tracker.store.contract`; do not edit by hand.
-- SQLite dialect; the same ORM creates the equivalent tables on PostgreSQL.

-- A set of runs recorded together to answer one question (tracker.experiment.KINDS), planned as
--     arms (``experiment_arm``) and linked to each arm's run (``experiment_run``).
--   kind: l1-bypass, fusion, variants, batch, library or algorithms
--   status: running, complete, failed or interrupted
--   settings: batch(es), variants, gpus, backend, repeat, warmup, device, ncu settings, executor
--   host: where it ran (schema v4; NULL in older experiments)
--   process_start: start time of the process, to tell a reused pid
CREATE TABLE experiment (
    id INTEGER NOT NULL,
    kind VARCHAR NOT NULL,
    status VARCHAR NOT NULL,
    network VARCHAR NOT NULL,
    network_options JSON NOT NULL,
    settings JSON NOT NULL,
    command_line VARCHAR NOT NULL,
    tracker_version VARCHAR NOT NULL,
    started_at DATETIME NOT NULL,
    finished_at DATETIME,
    error TEXT,
    host VARCHAR,
    pid INTEGER,
    process_start VARCHAR,
    PRIMARY KEY (id),
    CONSTRAINT experiment_status CHECK (status IN ('running', 'complete', 'failed', 'interrupted'))
);

-- What a metric name means, from the catalog (tracker/metrics.py): unit, meaning,
--     how it rolls up over launches. What each collector calls it is ``metric_source``'s.
--   family: time, fp, stall, issue, cache, traffic, throughput, utilization, peak
--   rollup: sum, max or weighted:<metric>
--   category: stalls: paper 003's (nvprof's) name for the reason
CREATE TABLE metric_def (
    name VARCHAR NOT NULL,
    family VARCHAR NOT NULL,
    unit VARCHAR NOT NULL,
    description TEXT NOT NULL,
    rollup VARCHAR NOT NULL,
    category VARCHAR,
    PRIMARY KEY (name)
);

-- One profile of one network at one batch size: its settings, provenance and outcome.
--   status: running, complete, failed or interrupted
--   phases: fwd, bwd or both
--   variants: op -> kernel variant
--   tiles: 'layer/phase' -> the GEMM tile it ran where it differs from the default: `tracker tune`'s, or the default plan's fitted to a Winograd or FFT batched GEMM's M and N ({}: every default); NULL: nothing ran (model) or recorded before schema v5
--   tuned_variants: 'layer/phase' -> the variant it ran where `tracker tune`'s fastest differs from the plan's (run.variants): Winograd, FFT or another GEMM ({}: the plan's everywhere); NULL: nothing ran (model) or recorded before schema v12
--   implementation: ours (tracker's kernels) or torch (PyTorch: cuDNN and cuBLAS); ours before schema v6
--   loaders: how our GEMM kernels fill shared memory: async (cp.async, the default build), staged (through registers: the L1-bypass build, and --staged with L1 cached) or library (--impl torch); async before schema v7
--   library: the library arm's versions and settings (torch, cudnn, cublas, tf32, cudnn_benchmark); NULL for ours
--   backend: ncu, nvprof, events or model
--   device_name: the GPU measured, or the catalog device predicted for
--   collector_version: pass 2's collector's version (its name is backend)
--   collector_settings: how pass 2's collector ran (ncu: replay_mode, cache_control, clock_control); NULL without one
--   repeat: measured iterations per launch
--   counter_iterations: how many measured iterations pass 2 (ncu, nvprof) collected counters from: the first ones, their launches carrying the counters; NULL: the run holds no counters (model, events, or a pass 2 that failed or was interrupted). Schema v9; older runs with counters had every iteration profiled
--   predicted_peak_bytes: model's peak memory of one training step
--   measured_peak_bytes: device memory high-water mark
--   process_start: start time of the process, to tell a reused pid
--   provenance: the code that made it (tracker/provenance.py): tracker's version, its commit and the kernels' newest commit, each with whether its tree had uncommitted changes; NULL before schema v16
--   plan: 'layer/phase' -> the variant our kernels run there (or, on the model backend, would): the conv rule's algorithm (tracker/ops/conv_rule.py), --variant's choice or `tracker tune`'s; the model predicts the algorithm it names. NULL: a library's run, a network our kernels cannot run, or recorded before schema v17
CREATE TABLE run (
    id INTEGER NOT NULL,
    status VARCHAR NOT NULL,
    network VARCHAR NOT NULL,
    network_options JSON NOT NULL,
    batch INTEGER NOT NULL,
    phases VARCHAR NOT NULL,
    dtype_bits INTEGER NOT NULL,
    variants JSON NOT NULL,
    tiles JSON,
    tuned_variants JSON,
    l1_bypass BOOLEAN NOT NULL,
    implementation VARCHAR DEFAULT 'ours' NOT NULL,
    loaders VARCHAR DEFAULT 'async' NOT NULL,
    library JSON,
    backend VARCHAR NOT NULL,
    backend_reason VARCHAR NOT NULL,
    device_name VARCHAR,
    compute_capability VARCHAR,
    sm_count INTEGER,
    sm_clock_mhz DOUBLE,
    mem_clock_mhz DOUBLE,
    driver_version VARCHAR,
    cuda_version VARCHAR,
    collector_version VARCHAR,
    collector_settings JSON,
    repeat INTEGER NOT NULL,
    counter_iterations INTEGER,
    predicted_peak_bytes INTEGER,
    measured_peak_bytes INTEGER,
    command_line VARCHAR NOT NULL,
    tracker_version VARCHAR NOT NULL,
    host VARCHAR NOT NULL,
    pid INTEGER NOT NULL,
    process_start VARCHAR,
    started_at DATETIME NOT NULL,
    finished_at DATETIME,
    error TEXT,
    provenance JSON,
    "plan" JSON,
    PRIMARY KEY (id),
    CONSTRAINT run_status CHECK (status IN ('running', 'complete', 'failed', 'interrupted'))
);

-- One row: the schema version this database was created with.
CREATE TABLE schema_info (
    version INTEGER NOT NULL,
    tracker_version VARCHAR NOT NULL,
    created_at DATETIME NOT NULL,
    PRIMARY KEY (version)
);

-- One candidate GEMM schedule `tracker tune` tried for one layer phase on one GPU: the tile
--     (``128x64x8/split4``), whether it matched the NumPy reference, and its median time. The plan
--     runs the fastest verified tile for the GPU and shape (``tracker.tune.best``). Added by
--     `tracker tune` to a database made before it (an optional table: older trackers ignore it).
--   device_name: the GPU measured (CUDA's name)
--   layer: the layer whose shape this is (one of those sharing it)
--   shape: the op's input shapes and parameters, e.g. 'w=64x3x11x11 x=128x...'
--   tile: CTA tile m x n x k, and split-K slices (0 or none: by rule)
--   splits: the split-K slices that ran at this shape
--   verified: matched the NumPy reference (at the verification batch)
--   error: worst relative error of the phase's outputs
--   time_ms: median over the repetitions, L2 flushed before each
--   spread_pct: (max - min) / median, in %
--   timer: events (CUDA events) or wall (host clock: the CPU emulation)
CREATE TABLE tuning (
    id INTEGER NOT NULL,
    device_name VARCHAR NOT NULL,
    op VARCHAR NOT NULL,
    variant VARCHAR NOT NULL,
    phase VARCHAR NOT NULL,
    layer VARCHAR NOT NULL,
    shape VARCHAR NOT NULL,
    tile VARCHAR NOT NULL,
    splits INTEGER NOT NULL,
    verified BOOLEAN NOT NULL,
    error FLOAT,
    time_ms FLOAT,
    spread_pct FLOAT,
    timer VARCHAR NOT NULL,
    tracker_version VARCHAR NOT NULL,
    created_at DATETIME NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT tuning_phase CHECK (phase IN ('fwd', 'bwd_data', 'bwd_weight'))
);
CREATE INDEX tuning_by_shape ON tuning (device_name, op, variant, phase, shape);

-- One planned arm of an experiment (schema v8): what it runs (``spec``), where and how it is
--     doing. An executor (tracker/executors) queues it; the process that runs it marks it running
--     with its node and pid, then complete (with its run), failed (with the reason and its log's
--     tail) or interrupted. Re-running the experiment keeps the complete arms and runs the rest.
--   position: order planned, from 0
--   label: experiment_run.arm of its run
--   spec: what the arm runs: arm (its label before the sweep's axes), batch, variants, l1_bypass, staged, implementation
--   gpu: the GPU kind asked for (--gpus); NULL: any
--   state: queued, running, complete, failed or interrupted
--   executor: local or slurm
--   job: the engine's job id (Slurm: array job _ task)
--   attempts: times queued: a resumed experiment queues its unfinished arms again
--   node: the host it ran on
--   process_start: start time of the process, to tell a reused pid
--   device_name: the GPU measured, or the catalog device predicted for
--   run_id: its latest attempt's run
--   reason: why it failed or was interrupted
--   log_path: where the engine writes its output
--   log: the last lines of its output, when it ended
CREATE TABLE experiment_arm (
    experiment_id INTEGER NOT NULL,
    position INTEGER NOT NULL,
    label VARCHAR NOT NULL,
    comparison VARCHAR NOT NULL,
    baseline BOOLEAN NOT NULL,
    spec JSON NOT NULL,
    gpu VARCHAR,
    state VARCHAR NOT NULL,
    executor VARCHAR NOT NULL,
    job VARCHAR,
    attempts INTEGER NOT NULL,
    node VARCHAR,
    pid INTEGER,
    process_start VARCHAR,
    device_name VARCHAR,
    run_id INTEGER,
    reason TEXT,
    log_path VARCHAR,
    log TEXT,
    queued_at DATETIME NOT NULL,
    started_at DATETIME,
    finished_at DATETIME,
    PRIMARY KEY (experiment_id, position),
    CONSTRAINT experiment_arm_state CHECK (state IN ('queued', 'running', 'complete', 'failed', 'interrupted')),
    FOREIGN KEY(experiment_id) REFERENCES experiment (id) ON DELETE CASCADE,
    FOREIGN KEY(run_id) REFERENCES run (id) ON DELETE SET NULL
);

-- One run of an experiment: its arm, the comparison it belongs to, and whether it is that
--     comparison's baseline (every other run of the comparison is measured against it).
--   position: order in which the arms ran, from 0
--   arm: what this run varies, e.g. 'shared cg', 'fused', 'batch 64'
--   comparison: the runs compared with each other (e.g. one variant's ca and cg)
CREATE TABLE experiment_run (
    experiment_id INTEGER NOT NULL,
    run_id INTEGER NOT NULL,
    position INTEGER NOT NULL,
    arm VARCHAR NOT NULL,
    comparison VARCHAR NOT NULL,
    baseline BOOLEAN NOT NULL,
    PRIMARY KEY (experiment_id, run_id),
    FOREIGN KEY(experiment_id) REFERENCES experiment (id) ON DELETE CASCADE,
    FOREIGN KEY(run_id) REFERENCES run (id) ON DELETE CASCADE
);

-- A layer of the run's network with its resolved shapes (per sample) and parameter count.
--   inputs: names of the layers feeding it ('input': the network input)
CREATE TABLE layer (
    run_id INTEGER NOT NULL,
    layer_id INTEGER NOT NULL,
    name VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,
    attributes JSON NOT NULL,
    inputs JSON NOT NULL,
    input_shapes JSON NOT NULL,
    output_shape JSON NOT NULL,
    params INTEGER NOT NULL,
    PRIMARY KEY (run_id, layer_id),
    FOREIGN KEY(run_id) REFERENCES run (id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX layer_by_name ON layer (run_id, name);

-- The name a run's collector gave each metric it stored (its ``backend``: ncu, nvprof), as its
--     own output and documentation spell it.
--   source: the collector's name: ncu's lts__t_sector_hit_rate.pct, nvprof's l2_tex_hit_rate
CREATE TABLE metric_source (
    run_id INTEGER NOT NULL,
    name VARCHAR NOT NULL,
    source VARCHAR NOT NULL,
    PRIMARY KEY (run_id, name),
    FOREIGN KEY(run_id) REFERENCES run (id) ON DELETE CASCADE,
    FOREIGN KEY(name) REFERENCES metric_def (name)
);

-- Per run, layer, phase and measured iteration, where its launches have starts: the GPU idle
--     before them (each launch's wait since every earlier launch of its iteration had ended; 0 where
--     it overlapped one; nothing before the iteration's first), the time they ran, and when the first
--     began and the last ended. Written with the launches (tracker/store/rollups.py).
--   busy_ms: the launches' durations summed
--   idle_ms: the GPU idle before each of them, summed
CREATE TABLE rollup_idle (
    run_id INTEGER NOT NULL,
    layer_id INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    repeat INTEGER NOT NULL,
    launches INTEGER NOT NULL,
    busy_ms FLOAT NOT NULL,
    idle_ms FLOAT NOT NULL,
    first_start_ns BIGINT NOT NULL,
    last_end_ns BIGINT NOT NULL,
    PRIMARY KEY (run_id, layer_id, phase, repeat),
    FOREIGN KEY(run_id) REFERENCES run (id) ON DELETE CASCADE
);

-- Per profiled launch: every catalog metric as a column, and FP32 FLOPs (launch_metrics reads it).
--   flops: FP32 FLOPs: fadd + fmul + 2 ffma, or nvprof's total
CREATE TABLE rollup_launch (
    run_id INTEGER NOT NULL,
    invocation INTEGER NOT NULL,
    duration_ns FLOAT,
    cycles_elapsed FLOAT,
    sm_active_cycles FLOAT,
    sm_clock_hz FLOAT,
    dram_clock_hz FLOAT,
    l2_clock_hz FLOAT,
    l1_clock_hz FLOAT,
    fadd FLOAT,
    fmul FLOAT,
    ffma FLOAT,
    fp32_flops FLOAT,
    fp32_inst FLOAT,
    instructions FLOAT,
    stall_barrier FLOAT,
    stall_branch_resolving FLOAT,
    stall_dispatch_stall FLOAT,
    stall_drain FLOAT,
    stall_imc_miss FLOAT,
    stall_lg_throttle FLOAT,
    stall_long_scoreboard FLOAT,
    stall_math_pipe_throttle FLOAT,
    stall_membar FLOAT,
    stall_mio_throttle FLOAT,
    stall_misc FLOAT,
    stall_no_instruction FLOAT,
    stall_not_selected FLOAT,
    stall_short_scoreboard FLOAT,
    stall_sleeping FLOAT,
    stall_tex_throttle FLOAT,
    stall_wait FLOAT,
    stall_gmma FLOAT,
    stall_exec_dependency FLOAT,
    stall_memory_throttle FLOAT,
    stall_pipe_busy FLOAT,
    stall_sync FLOAT,
    stall_other FLOAT,
    stall_selected FLOAT,
    warps_per_issue FLOAT,
    l1_hit_rate FLOAT,
    l1_global_load_hit_rate FLOAT,
    l2_hit_rate FLOAT,
    l2_read_hit_rate FLOAT,
    l2_write_hit_rate FLOAT,
    l1_global_load_requests FLOAT,
    l1_global_load_sectors FLOAT,
    l1_global_store_requests FLOAT,
    l1_global_store_sectors FLOAT,
    l1_local_load_sectors FLOAT,
    l1_local_store_sectors FLOAT,
    l1_requests FLOAT,
    l1_sectors FLOAT,
    l1_bytes FLOAT,
    shared_load_wavefronts FLOAT,
    shared_store_wavefronts FLOAT,
    shared_load_bank_conflicts FLOAT,
    shared_store_bank_conflicts FLOAT,
    shared_bytes FLOAT,
    l2_read_sectors FLOAT,
    l2_write_sectors FLOAT,
    l2_sectors FLOAT,
    l2_bytes FLOAT,
    l2_to_l1_read_bytes FLOAT,
    l1_to_l2_write_bytes FLOAT,
    dram_read_sectors FLOAT,
    dram_write_sectors FLOAT,
    dram_read_bytes FLOAT,
    dram_write_bytes FLOAT,
    l1_lg_writeback_cycles FLOAT,
    sm_throughput_pct FLOAT,
    memory_throughput_pct FLOAT,
    l1_throughput_pct FLOAT,
    shared_throughput_pct FLOAT,
    l2_throughput_pct FLOAT,
    dram_throughput_pct FLOAT,
    achieved_occupancy FLOAT,
    sm_efficiency FLOAT,
    ipc FLOAT,
    issue_slot_pct FLOAT,
    eligible_warps FLOAT,
    warp_execution_efficiency FLOAT,
    fma_pipe_pct FLOAT,
    alu_pipe_pct FLOAT,
    lsu_pipe_pct FLOAT,
    xu_pipe_pct FLOAT,
    fp32_fu_utilization_level FLOAT,
    ldst_fu_utilization_level FLOAT,
    special_fu_utilization_level FLOAT,
    shared_utilization_level FLOAT,
    l1_utilization_level FLOAT,
    l2_utilization_level FLOAT,
    dram_utilization_level FLOAT,
    ffma_peak_per_cycle FLOAT,
    dram_bytes_peak_per_cycle FLOAT,
    l2_to_l1_bytes_peak_per_cycle FLOAT,
    l1_lg_writeback_peak_per_cycle FLOAT,
    replay_passes FLOAT,
    flops FLOAT,
    PRIMARY KEY (run_id, invocation),
    FOREIGN KEY(run_id) REFERENCES run (id) ON DELETE CASCADE
);

-- Per run, layer, phase and metric: the median over measured iterations, min, max and spread.
--     Written with the counters (tracker/store/rollups.py).
--   value: median over measured iterations
--   spread_pct: (max - min) / |median|, in %
CREATE TABLE rollup_metric (
    run_id INTEGER NOT NULL,
    layer_id INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    name VARCHAR NOT NULL,
    value FLOAT,
    min_value FLOAT,
    max_value FLOAT,
    repeats INTEGER NOT NULL,
    spread_pct FLOAT,
    PRIMARY KEY (run_id, layer_id, phase, name),
    FOREIGN KEY(run_id) REFERENCES run (id) ON DELETE CASCADE
);
CREATE INDEX rollup_metric_by_name ON rollup_metric (name, run_id);

-- Per run, layer, phase, measured iteration and metric: the metric rolled up over the phase's
--     launches as its metric_def.rollup says. Written with the counters (tracker/store/rollups.py).
CREATE TABLE rollup_metric_repeat (
    run_id INTEGER NOT NULL,
    layer_id INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    repeat INTEGER NOT NULL,
    name VARCHAR NOT NULL,
    value FLOAT,
    PRIMARY KEY (run_id, layer_id, phase, repeat, name),
    FOREIGN KEY(run_id) REFERENCES run (id) ON DELETE CASCADE
);

-- Per run, layer, phase and stall reason: its share of all stalls and its paper-003 category.
CREATE TABLE rollup_stall (
    run_id INTEGER NOT NULL,
    layer_id INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    name VARCHAR NOT NULL,
    category VARCHAR,
    share FLOAT,
    PRIMARY KEY (run_id, layer_id, phase, name),
    FOREIGN KEY(run_id) REFERENCES run (id) ON DELETE CASCADE
);

-- Per run, layer, phase and stall category: its share, and its place (1 dominates).
CREATE TABLE rollup_stall_category (
    run_id INTEGER NOT NULL,
    layer_id INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    category VARCHAR NOT NULL,
    share FLOAT,
    place INTEGER NOT NULL,
    PRIMARY KEY (run_id, layer_id, phase, category),
    FOREIGN KEY(run_id) REFERENCES run (id) ON DELETE CASCADE
);

-- Per run, layer and phase: the phase's event time per measured iteration, rolled up over the
--     iterations (median, min, max, spread). Written with the launches (tracker/store/rollups.py).
--   launches: launches per measured iteration
--   measured_ms: median over measured iterations
--   repeats: measured iterations timed
--   spread_pct: (max - min) / median, in %
--   algorithm: the algorithm its launches ran (launch.algorithm)
CREATE TABLE rollup_time (
    run_id INTEGER NOT NULL,
    layer_id INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    launches INTEGER NOT NULL,
    measured_ms FLOAT,
    min_ms FLOAT,
    max_ms FLOAT,
    repeats INTEGER NOT NULL,
    spread_pct FLOAT,
    algorithm VARCHAR,
    PRIMARY KEY (run_id, layer_id, phase),
    FOREIGN KEY(run_id) REFERENCES run (id) ON DELETE CASCADE
);

-- One kernel launch, in invocation order, with the layer and phase it belongs to (pass 1).
--   repeat: which measured iteration, from 0
--   l1_policy: ca (cache in L1) or cg (bypass L1)
--   time_ms: CUDA-event time
--   start_ns: when it began on the device, in ns after the run's first launch began; NULL where the run timed durations only, and in runs recorded before schema v14
--   algorithm: its layer phase's algorithm as the phase's kernel names say (direct, implicit_gemm, implicit_precomp_gemm, gemm, winograd, winograd_nonfused, fft), ours and a library's alike; NULL where no name says (an element-wise phase) and in runs recorded before schema v6
--   role: the kernel's part in its layer phase: math, or the work around it (transform, reduction, fill, copy, offsets, epilogue, other; a library's copies and fills are logged as launches too, with no grid); NULL in runs recorded before schema v6
CREATE TABLE launch (
    run_id INTEGER NOT NULL,
    invocation INTEGER NOT NULL,
    layer_id INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    repeat INTEGER NOT NULL,
    kernel_name VARCHAR NOT NULL,
    variant VARCHAR NOT NULL,
    l1_policy VARCHAR NOT NULL,
    grid_x INTEGER NOT NULL,
    grid_y INTEGER NOT NULL,
    grid_z INTEGER NOT NULL,
    block_x INTEGER NOT NULL,
    block_y INTEGER NOT NULL,
    block_z INTEGER NOT NULL,
    shared_bytes INTEGER NOT NULL,
    registers INTEGER,
    time_ms FLOAT,
    start_ns BIGINT,
    algorithm VARCHAR,
    role VARCHAR,
    PRIMARY KEY (run_id, invocation),
    FOREIGN KEY(run_id, layer_id) REFERENCES layer (run_id, layer_id) ON DELETE CASCADE,
    CONSTRAINT launch_phase CHECK (phase IN ('fwd', 'bwd_data', 'bwd_weight')),
    FOREIGN KEY(run_id) REFERENCES run (id) ON DELETE CASCADE
);
CREATE INDEX launch_by_layer ON launch (run_id, layer_id, phase);

-- The analytic model's figures for a layer and phase, with the counting convention used.
--   bytes: compulsory bytes at the run's dtype_bits
--   intensity: ops per byte
--   attainable_gflops: roofline, when a device is known
--   bound: compute or memory
--   convention: what ops counts for this layer kind
CREATE TABLE prediction (
    run_id INTEGER NOT NULL,
    layer_id INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    macs INTEGER NOT NULL,
    ops INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    intensity FLOAT NOT NULL,
    attainable_gflops FLOAT,
    predicted_ms FLOAT,
    bound VARCHAR,
    convention TEXT NOT NULL,
    PRIMARY KEY (run_id, layer_id, phase),
    FOREIGN KEY(run_id, layer_id) REFERENCES layer (run_id, layer_id) ON DELETE CASCADE,
    CONSTRAINT prediction_phase CHECK (phase IN ('fwd', 'bwd_data', 'bwd_weight'))
);

-- One counter of one launch (pass 2), narrow.
CREATE TABLE metric (
    run_id INTEGER NOT NULL,
    invocation INTEGER NOT NULL,
    name VARCHAR NOT NULL,
    value FLOAT,
    PRIMARY KEY (run_id, invocation, name),
    FOREIGN KEY(run_id, invocation) REFERENCES launch (run_id, invocation) ON DELETE CASCADE,
    FOREIGN KEY(name) REFERENCES metric_def (name)
);
