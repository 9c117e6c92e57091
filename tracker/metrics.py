"""The metric catalog: every counter tracker collects, once, for ncu and nvprof alike. Ground
floor: the profilers, the store, its views and the analyses all read it; it imports nothing of
tracker.

Each entry is a logical name (what the store, views, CLI and notebooks use) with its Nsight
Compute name for sm_70 and newer, its nvprof name where one exists, its unit, what it means and
how it rolls up over several launches. Names and mappings follow NVIDIA's Profiling Guide and its
nvprof-to-ncu "Metric Comparison" table; the sm_86 and sm_90 names are checked in tests against
real ``ncu --query-metrics`` listings (tests/data/ncu/SOURCES.md).

Rollups (used by the views): ``sum`` adds over launches (counts, bytes, time); ``max`` for
constants of the device (peaks, clocks); ``weighted:<name>`` averages weighted by another metric
(a hit rate by the sectors it is a rate of, a percentage of peak by duration).

Stalls: ncu's warp-state reasons (cycles per issued instruction in each state, a hardware
counter, not sampled) and nvprof's ``stall_*`` percentages are both stored as ``stall_<reason>``;
each carries the nvprof ``category`` that paper 003 names, so a breakdown reads in the paper's
terms. A launch's stalls all come from one tool, so shares within a launch are consistent.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricDef:
    name: str
    family: str  # time, fp, stall, issue, cache, traffic, throughput, utilization, peak, profiler
    unit: str
    description: str
    rollup: str  # sum, max or weighted:<name>
    ncu: str | None = None  # full ncu metric name (base name + rollup/submetric)
    nvprof: str | None = None
    nvprof_scale: float = 1.0  # nvprof value x scale = catalog unit
    ncu_scale: float = 1.0
    category: str | None = None  # stalls: paper 003's (nvprof's) name for the reason
    min_cc: float = 7.0  # the ncu name exists from this compute capability on
    max_cc: float = 99.0  # ... up to this one (ncu 2025.3 lists no lsu_writeback on an H100)
    requested: bool = True  # False: ncu reports it unasked (raw page), so never put it in --metrics

    @property
    def ncu_base(self) -> str | None:
        """The name ``ncu --query-metrics`` lists: the ncu name without rollup and submetric."""
        return self.ncu.split(".", 1)[0] if self.ncu else None


_TIME_WEIGHTED = "weighted:duration_ns"
# ncu's L2 hit rates are kept as collected. tracker collects no count of L2 hits (sectors only), so
# a bounded hits / lookups cannot be computed, nor added to recordings made on a GPU we no longer
# have; and ncu leaves a rate over 100 % unclamped on purpose, "to ensure that the rest of the
# profiler report remains self-consistent" (Profiling Guide, Range and Precision). The batch-16 H100
# recording reads 100.25-102.24 % (tests/test_profilers.py), and in it a launch's L2 sector counts
# disagree (read + write sectors exceed all sectors, by 4.8 % in conv5's data gradient), which only
# counts taken in different replay passes (18 a launch) can do.
_L2_OVER_100 = ("ncu's figure, not clamped: it can exceed 100 % when the hits and the lookups are counted in "
                "different replay passes whose L2 traffic differs (a launch too short or uneven to reach a steady "
                "state, about 20 µs; other engines using the L2) - Nsight Compute Profiling Guide, Range and "
                "Precision: https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html#range-and-precision")
# Per-issue ratios x instructions issued = warp-cycles in that state: weighting by instructions sums exactly.
_ISSUE_WEIGHTED = "weighted:instructions"


def _stall(reason: str, category: str | None, meaning: str, nvprof: str | None = None,
           min_cc: float = 7.0) -> MetricDef:
    return MetricDef(
        f"stall_{reason}", "stall", "warps per issue cycle (ncu); % of stalls (nvprof)",
        f"warps stalled waiting for {meaning}, per issue-active cycle", _ISSUE_WEIGHTED,
        ncu=f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio", nvprof=nvprof,
        category=category, min_cc=min_cc)


def _nvprof_stall(name: str, meaning: str) -> MetricDef:
    """nvprof reasons that ncu splits in two (their ncu parts are listed with the same category)."""
    return MetricDef(f"stall_{name}", "stall", "% of stalls (nvprof)", f"nvprof: {meaning}", _ISSUE_WEIGHTED,
                     nvprof=f"stall_{name}", category=name)


STALLS = (
    _stall("barrier", "sync", "sibling warps at a CTA barrier (__syncthreads)"),
    _stall("branch_resolving", "other", "a branch target to be computed"),
    _stall("dispatch_stall", "other", "the dispatcher, which held back a ready instruction"),
    _stall("drain", "memory_throttle", "memory writes to drain after EXIT"),
    _stall("imc_miss", "constant_memory_dependency", "an immediate-constant-cache miss",
           nvprof="stall_constant_memory_dependency"),
    _stall("lg_throttle", "memory_throttle", "a slot in the local/global (LSU) instruction queue"),
    _stall("long_scoreboard", "memory_dependency", "an L1TEX result (global, local, texture load)",
           nvprof="stall_memory_dependency"),
    _stall("math_pipe_throttle", "pipe_busy", "a busy execution pipe"),
    _stall("membar", "sync", "a memory barrier"),
    _stall("mio_throttle", "pipe_busy", "a slot in the MIO queue (shared memory, special functions)"),
    _stall("misc", "other", "a miscellaneous hardware reason"),
    _stall("no_instruction", "inst_fetch", "instruction fetch or an instruction-cache miss",
           nvprof="stall_inst_fetch"),
    _stall("not_selected", "not_selected", "nothing: it was eligible but another warp issued",
           nvprof="stall_not_selected"),
    _stall("short_scoreboard", "exec_dependency", "an MIO result (shared memory, MUFU), not L1TEX"),
    _stall("sleeping", "sleeping", "nanosleep to expire", nvprof="stall_sleeping"),
    _stall("tex_throttle", "texture", "a slot in the TEX queue", nvprof="stall_texture"),
    _stall("wait", "exec_dependency", "a fixed-latency dependency"),
    _stall("gmma", "pipe_busy", "warpgroup MMA (Hopper)", min_cc=9.0),
    _nvprof_stall("exec_dependency", "an input not yet available (ncu: short_scoreboard + wait)"),
    _nvprof_stall("memory_throttle", "memory pipeline throttle (ncu: drain + lg_throttle)"),
    _nvprof_stall("pipe_busy", "a busy compute pipeline (ncu: math_pipe_throttle + mio_throttle)"),
    _nvprof_stall("sync", "a __syncthreads or memory barrier (ncu: barrier + membar)"),
    _nvprof_stall("other", "other reasons (ncu: dispatch_stall + misc)"),
)

M = MetricDef
CATALOG: tuple[MetricDef, ...] = (
    # time and clocks
    M("duration_ns", "time", "ns", "kernel duration on the GPU", "sum", ncu="gpu__time_duration.sum"),
    M("cycles_elapsed", "time", "cycles", "elapsed SM cycles, averaged over SMs", "sum",
      ncu="sm__cycles_elapsed.avg", nvprof="elapsed_cycles_sm"),
    M("sm_active_cycles", "time", "cycles", "cycles with at least one warp in flight, averaged over SMs",
      "sum", ncu="sm__cycles_active.avg"),
    M("sm_clock_hz", "time", "Hz", "SM clock during the launch", _TIME_WEIGHTED,
      ncu="sm__cycles_elapsed.avg.per_second"),
    M("dram_clock_hz", "time", "Hz", "DRAM clock during the launch", _TIME_WEIGHTED,
      ncu="dram__cycles_elapsed.avg.per_second"),
    M("l2_clock_hz", "time", "Hz", "L2 (LTS) clock during the launch", _TIME_WEIGHTED,
      ncu="lts__cycles_elapsed.avg.per_second"),
    M("l1_clock_hz", "time", "Hz", "L1/TEX clock during the launch", _TIME_WEIGHTED,
      ncu="l1tex__cycles_elapsed.avg.per_second"),
    # floating point (thread-level, predicated-on: masked lanes do not count)
    M("fadd", "fp", "inst", "FP32 add instructions executed by threads", "sum",
      ncu="smsp__sass_thread_inst_executed_op_fadd_pred_on.sum", nvprof="flop_count_sp_add"),
    M("fmul", "fp", "inst", "FP32 multiply instructions executed by threads", "sum",
      ncu="smsp__sass_thread_inst_executed_op_fmul_pred_on.sum", nvprof="flop_count_sp_mul"),
    M("ffma", "fp", "inst", "FP32 fused multiply-add instructions executed by threads (2 FLOPs each)", "sum",
      ncu="smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", nvprof="flop_count_sp_fma"),
    M("fp32_flops", "fp", "FLOP", "FP32 FLOPs as nvprof counts them (fadd + fmul + 2 ffma); ncu runs derive "
      "the same from the three counters", "sum", nvprof="flop_count_sp"),
    M("fp32_inst", "fp", "inst", "all FP32 instructions executed by threads", "sum",
      ncu="smsp__sass_thread_inst_executed_op_fp32_pred_on.sum", nvprof="inst_fp_32"),
    M("instructions", "issue", "inst", "warp instructions executed", "sum",
      ncu="smsp__inst_executed.sum", nvprof="inst_executed"),
    # stalls
    *STALLS,
    M("stall_selected", "issue", "warps per issue cycle", "the warp that issued (not a stall)", _ISSUE_WEIGHTED,
      ncu="smsp__average_warps_issue_stalled_selected_per_issue_active.ratio"),
    M("warps_per_issue", "issue", "warps per issue cycle",
      "active warps per issue-active cycle: the cycles between two issues, the sum over all states",
      _ISSUE_WEIGHTED, ncu="smsp__average_warps_active_per_issue_active.ratio"),
    # caches
    M("l1_hit_rate", "cache", "%", "L1/TEX hit rate over all sectors", "weighted:l1_sectors",
      ncu="l1tex__t_sector_hit_rate.pct", nvprof="tex_cache_hit_rate"),
    M("l1_global_load_hit_rate", "cache", "%", "L1/TEX hit rate of global loads", "weighted:l1_global_load_sectors",
      ncu="l1tex__t_sector_pipe_lsu_mem_global_op_ld_hit_rate.pct"),
    M("l2_hit_rate", "cache", "%", f"L2 hit rate over all sectors; {_L2_OVER_100}", "weighted:l2_sectors",
      ncu="lts__t_sector_hit_rate.pct", nvprof="l2_tex_hit_rate"),
    M("l2_read_hit_rate", "cache", "%", "L2 hit rate of reads", "weighted:l2_read_sectors",
      ncu="lts__t_sector_op_read_hit_rate.pct", nvprof="l2_tex_read_hit_rate"),
    # A store counts as a hit, so writes read about 100 %, and over it as l2_hit_rate says (an answer on
    # NVIDIA's forum: https://forums.developer.nvidia.com/t/l2-hit-rate-always-at-100/257458).
    M("l2_write_hit_rate", "cache", "%", "L2 hit rate of writes (ncu counts a store as a hit: about 100 %; "
      "above it as l2_hit_rate explains)", "weighted:l2_write_sectors",
      ncu="lts__t_sector_op_write_hit_rate.pct", nvprof="l2_tex_write_hit_rate"),
    # traffic: L1/TEX (global, local), shared memory, L2, DRAM. A sector is 32 bytes.
    M("l1_global_load_requests", "traffic", "requests", "global load requests to L1/TEX", "sum",
      ncu="l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", nvprof="global_load_requests"),
    M("l1_global_load_sectors", "traffic", "sectors", "sectors of global loads at L1/TEX", "sum",
      ncu="l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", nvprof="gld_transactions"),
    M("l1_global_store_requests", "traffic", "requests", "global store requests to L1/TEX", "sum",
      ncu="l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", nvprof="global_store_requests"),
    M("l1_global_store_sectors", "traffic", "sectors", "sectors of global stores at L1/TEX", "sum",
      ncu="l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", nvprof="gst_transactions"),
    M("l1_local_load_sectors", "traffic", "sectors", "sectors of local (spill) loads at L1/TEX", "sum",
      ncu="l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum", nvprof="local_load_transactions"),
    M("l1_local_store_sectors", "traffic", "sectors", "sectors of local (spill) stores at L1/TEX", "sum",
      ncu="l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum", nvprof="local_store_transactions"),
    M("l1_requests", "traffic", "requests", "all requests to L1/TEX", "sum", ncu="l1tex__t_requests.sum"),
    M("l1_sectors", "traffic", "sectors", "all sectors accessed at L1/TEX", "sum", ncu="l1tex__t_sectors.sum"),
    M("l1_bytes", "traffic", "bytes", "bytes accessed at L1/TEX", "sum", ncu="l1tex__t_bytes.sum"),
    M("shared_load_wavefronts", "traffic", "wavefronts", "shared-memory load wavefronts (nvprof: transactions)",
      "sum", ncu="l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", nvprof="shared_load_transactions"),
    M("shared_store_wavefronts", "traffic", "wavefronts", "shared-memory store wavefronts (nvprof: transactions)",
      "sum", ncu="l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", nvprof="shared_store_transactions"),
    M("shared_load_bank_conflicts", "traffic", "conflicts", "bank conflicts of shared-memory loads", "sum",
      ncu="l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"),
    M("shared_store_bank_conflicts", "traffic", "conflicts", "bank conflicts of shared-memory stores", "sum",
      ncu="l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
    M("shared_bytes", "traffic", "bytes", "shared-memory bytes the instructions asked for", "sum",
      ncu="smsp__sass_data_bytes_mem_shared.sum"),
    M("l2_read_sectors", "traffic", "sectors", "L2 sectors read (nvprof's count adds atomics and reductions)",
      "sum", ncu="lts__t_sectors_op_read.sum", nvprof="l2_read_transactions"),
    M("l2_write_sectors", "traffic", "sectors", "L2 sectors written (nvprof's count adds atomics and reductions)",
      "sum", ncu="lts__t_sectors_op_write.sum", nvprof="l2_write_transactions"),
    M("l2_sectors", "traffic", "sectors", "all L2 sectors accessed", "sum", ncu="lts__t_sectors.sum"),
    M("l2_bytes", "traffic", "bytes", "bytes accessed at L2", "sum", ncu="lts__t_bytes.sum"),
    M("l2_to_l1_read_bytes", "traffic", "bytes", "bytes read from L2 into L1/TEX", "sum",
      ncu="l1tex__m_xbar2l1tex_read_bytes.sum"),
    M("l1_to_l2_write_bytes", "traffic", "bytes", "bytes written from L1/TEX to L2", "sum",
      ncu="l1tex__m_l1tex2xbar_write_bytes.sum"),
    M("dram_read_sectors", "traffic", "sectors", "sectors read from DRAM", "sum",
      ncu="dram__sectors_read.sum", nvprof="dram_read_transactions"),
    M("dram_write_sectors", "traffic", "sectors", "sectors written to DRAM", "sum",
      ncu="dram__sectors_write.sum", nvprof="dram_write_transactions"),
    M("dram_read_bytes", "traffic", "bytes", "bytes read from DRAM", "sum", ncu="dram__bytes_read.sum"),
    M("dram_write_bytes", "traffic", "bytes", "bytes written to DRAM", "sum", ncu="dram__bytes_write.sum"),
    M("l1_lg_writeback_cycles", "traffic", "cycles",
      "cycles L1/TEX wrote back local/global data (x128 bytes: the L1 roofline's traffic)", "sum",
      ncu="l1tex__lsu_writeback_active_mem_lg.sum", min_cc=7.5, max_cc=8.9),
    # throughput, % of the unit's peak
    M("sm_throughput_pct", "throughput", "%", "compute (SM) throughput, % of peak", _TIME_WEIGHTED,
      ncu="sm__throughput.avg.pct_of_peak_sustained_elapsed"),
    M("memory_throughput_pct", "throughput", "%", "memory throughput (busiest unit), % of peak", _TIME_WEIGHTED,
      ncu="gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
    M("l1_throughput_pct", "throughput", "%", "L1/TEX throughput, % of peak", _TIME_WEIGHTED,
      ncu="l1tex__throughput.avg.pct_of_peak_sustained_active"),
    M("shared_throughput_pct", "throughput", "%", "shared-memory wavefronts, % of peak", _TIME_WEIGHTED,
      ncu="l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed"),
    M("l2_throughput_pct", "throughput", "%", "L2 throughput, % of peak", _TIME_WEIGHTED,
      ncu="lts__throughput.avg.pct_of_peak_sustained_elapsed"),
    M("dram_throughput_pct", "throughput", "%", "DRAM throughput, % of peak", _TIME_WEIGHTED,
      ncu="dram__throughput.avg.pct_of_peak_sustained_elapsed"),
    # utilization
    M("achieved_occupancy", "utilization", "%", "active warps per cycle, % of the SM's maximum", _TIME_WEIGHTED,
      ncu="sm__warps_active.avg.pct_of_peak_sustained_active", nvprof="achieved_occupancy", nvprof_scale=100.0),
    M("sm_efficiency", "utilization", "%", "cycles with a warp active on the SM sub-partition, % of elapsed",
      _TIME_WEIGHTED, ncu="smsp__cycles_active.avg.pct_of_peak_sustained_elapsed", nvprof="sm_efficiency"),
    M("ipc", "utilization", "inst/cycle", "warp instructions executed per active cycle, per SM", _TIME_WEIGHTED,
      ncu="sm__inst_executed.avg.per_cycle_active", nvprof="ipc"),
    M("issue_slot_pct", "utilization", "%", "issue slots used, % of active cycles", _TIME_WEIGHTED,
      ncu="smsp__issue_active.avg.pct_of_peak_sustained_active", nvprof="issue_slot_utilization"),
    M("eligible_warps", "utilization", "warps/cycle", "warps eligible to issue per active cycle", _TIME_WEIGHTED,
      ncu="smsp__warps_eligible.avg.per_cycle_active", nvprof="eligible_warps_per_cycle"),
    M("warp_execution_efficiency", "utilization", "%", "active threads per executed instruction, % of 32",
      _TIME_WEIGHTED, ncu="smsp__thread_inst_executed_per_inst_executed.ratio", ncu_scale=100 / 32,
      nvprof="warp_execution_efficiency"),
    M("fma_pipe_pct", "utilization", "%", "FMA pipe (FP32) busy, % of active cycles", _TIME_WEIGHTED,
      ncu="smsp__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"),
    M("alu_pipe_pct", "utilization", "%", "ALU pipe (integer, logic, FP32 compare) busy, % of active cycles",
      _TIME_WEIGHTED, ncu="sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active"),
    M("lsu_pipe_pct", "utilization", "%", "load/store pipe instructions, % of peak", _TIME_WEIGHTED,
      ncu="smsp__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active"),
    M("xu_pipe_pct", "utilization", "%", "special-function (XU) pipe instructions, % of peak", _TIME_WEIGHTED,
      ncu="smsp__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"),
    # nvprof's utilization levels, 0 (idle) to 10 (max): the units paper 003's Figures 12 and 17 use
    *(M(f"{unit}_utilization_level", "utilization", "level 0-10", f"nvprof {what} utilization level", _TIME_WEIGHTED,
        nvprof=f"{nvprof}_utilization")
      for unit, nvprof, what in (("fp32_fu", "single_precision_fu", "single-precision function unit"),
                                 ("ldst_fu", "ldst_fu", "load/store function unit"),
                                 ("special_fu", "special_fu", "special function unit"),
                                 ("shared", "shared", "shared memory"), ("l1", "tex", "unified (L1/TEX) cache"),
                                 ("l2", "l2", "L2 cache"), ("dram", "dram", "device memory"))),
    # peaks per cycle, for the roofline (x the measured clock)
    M("ffma_peak_per_cycle", "peak", "inst/cycle", "peak FFMA thread instructions per SM cycle, whole GPU", "max",
      ncu="sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained"),
    M("dram_bytes_peak_per_cycle", "peak", "bytes/cycle", "peak DRAM bytes per DRAM cycle", "max",
      ncu="dram__bytes.sum.peak_sustained"),
    M("l2_to_l1_bytes_peak_per_cycle", "peak", "bytes/cycle", "peak L2-to-L1 read bytes per L2 cycle", "max",
      ncu="l1tex__m_xbar2l1tex_read_bytes.sum.peak_sustained"),
    M("l1_lg_writeback_peak_per_cycle", "peak", "cycles/cycle",
      "peak L1/TEX local/global writeback per L1 cycle (x128 bytes)", "max",
      ncu="l1tex__lsu_writeback_active_mem_lg.sum.peak_sustained", min_cc=7.5, max_cc=8.9),
    # what ncu adds to every raw-page row
    M("replay_passes", "profiler", "passes", "replay passes ncu needed for this launch", "max",
      ncu="profiler__replayer_passes", requested=False),
)

BY_NAME = {m.name: m for m in CATALOG}
BY_NCU = {m.ncu: m for m in CATALOG if m.ncu}
BY_NVPROF = {m.nvprof: m for m in CATALOG if m.nvprof}
FAMILIES = tuple(dict.fromkeys(m.family for m in CATALOG))


def ncu_metrics(cc: float | None = None) -> list[str]:
    """The names to pass to ``ncu --metrics`` for a GPU of compute capability ``cc``."""
    return [m.ncu for m in CATALOG if m.ncu and m.requested and (cc is None or m.min_cc <= cc <= m.max_cc)]


def metric_def_rows() -> list[dict]:
    """The catalog as rows of the store's ``metric_def`` table."""
    return [dict(name=m.name, family=m.family, unit=m.unit, description=m.description, rollup=m.rollup,
                 ncu=m.ncu, nvprof=m.nvprof, category=m.category) for m in CATALOG]


def from_ncu(values: dict[str, float | None]) -> dict[str, float | None]:
    """Catalog name -> value, from ncu metric name -> value (names outside the catalog dropped)."""
    return {BY_NCU[n].name: _scaled(v, BY_NCU[n].ncu_scale) for n, v in values.items() if n in BY_NCU}


def from_nvprof(values: dict[str, float | None]) -> dict[str, float | None]:
    """Catalog name -> value, from nvprof metric name -> value."""
    return {BY_NVPROF[n].name: _scaled(v, BY_NVPROF[n].nvprof_scale) for n, v in values.items() if n in BY_NVPROF}


def _scaled(value: float | None, scale: float) -> float | None:
    return None if value is None else value * scale
