"""The metric catalog: every counter tracker collects, once, whichever collector collects it.
Ground floor: the profilers, the store, its views and the analyses all read it; it imports nothing
of tracker.

Each entry is a logical name (what the store, views, CLI and notebooks use) with its unit, what it
means and how it rolls up over several launches. What each collector calls it lives with the
collector (``Sources``: ``tracker.profilers.ncu.SOURCES``, ``tracker.profilers.nvprof.SOURCES``),
so that a new collector adds its names beside its own code, and a run records the names its
collector gave each metric (the store's ``metric_source``).

Rollups (used by the views): ``sum`` adds over launches (counts, bytes, time); ``max`` for
constants of the device (peaks, clocks); ``weighted:<name>`` averages weighted by another metric
(a hit rate by the sectors it is a rate of, a percentage of peak by duration).

Stalls: ncu's warp-state reasons (cycles per issued instruction in each state, a hardware
counter, not sampled) and nvprof's ``stall_*`` percentages are both stored as ``stall_<reason>``;
each carries the nvprof ``category`` that paper 003 names, so a breakdown reads in the paper's
terms. A launch's stalls all come from one tool, so shares within a launch are consistent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class MetricDef:
    name: str
    family: str  # time, fp, stall, issue, cache, traffic, throughput, utilization, peak, profiler
    unit: str
    description: str
    rollup: str  # sum, max or weighted:<name>
    category: str | None = None  # stalls: paper 003's (nvprof's) name for the reason


_TIME_WEIGHTED = "weighted:duration_ns"
# ncu's L2 hit rates are kept as collected. tracker collects no count of L2 hits (sectors only), so
# a bounded hits / lookups cannot be computed, nor added to recordings made on a GPU we no longer
# have; and ncu leaves a rate over 100 % unclamped on purpose, "to ensure that the rest of the
# profiler report remains self-consistent" (Profiling Guide, Range and Precision). The batch-16 H100
# recording reads 100.25-102.24 % (tests/test_metric_catalog.py), and in it a launch's L2 sector counts
# disagree (read + write sectors exceed all sectors, by 4.8 % in conv5's data gradient), which only
# counts taken in different replay passes (18 a launch) can do.
_L2_OVER_100 = (
    "ncu's figure, not clamped: it can exceed 100 % when the hits and the lookups are counted in "
    "different replay passes whose L2 traffic differs (a launch too short or uneven to reach a steady "
    "state, about 20 µs; other engines using the L2) - Nsight Compute Profiling Guide, Range and "
    "Precision: https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html#range-and-precision"
)
# Per-issue ratios x instructions issued = warp-cycles in that state: weighting by instructions sums exactly.
_ISSUE_WEIGHTED = "weighted:instructions"


def _stall(reason: str, category: str | None, meaning: str) -> MetricDef:
    """A warp state of ncu's (nvprof names some of them too)."""
    return MetricDef(
        f"stall_{reason}",
        "stall",
        "warps per issue cycle (ncu); % of stalls (nvprof)",
        f"warps stalled waiting for {meaning}, per issue-active cycle",
        _ISSUE_WEIGHTED,
        category,
    )


def _nvprof_stall(name: str, meaning: str) -> MetricDef:
    """nvprof reasons that ncu splits in two (their ncu parts are listed with the same category)."""
    return MetricDef(f"stall_{name}", "stall", "% of stalls (nvprof)", f"nvprof: {meaning}", _ISSUE_WEIGHTED, name)


WARP_STATES = (  # ncu's stall reasons, which nvprof names in part
    _stall("barrier", "sync", "sibling warps at a CTA barrier (__syncthreads)"),
    _stall("branch_resolving", "other", "a branch target to be computed"),
    _stall("dispatch_stall", "other", "the dispatcher, which held back a ready instruction"),
    _stall("drain", "memory_throttle", "memory writes to drain after EXIT"),
    _stall("imc_miss", "constant_memory_dependency", "an immediate-constant-cache miss"),
    _stall("lg_throttle", "memory_throttle", "a slot in the local/global (LSU) instruction queue"),
    _stall("long_scoreboard", "memory_dependency", "an L1TEX result (global, local, texture load)"),
    _stall("math_pipe_throttle", "pipe_busy", "a busy execution pipe"),
    _stall("membar", "sync", "a memory barrier"),
    _stall("mio_throttle", "pipe_busy", "a slot in the MIO queue (shared memory, special functions)"),
    _stall("misc", "other", "a miscellaneous hardware reason"),
    _stall("no_instruction", "inst_fetch", "instruction fetch or an instruction-cache miss"),
    _stall("not_selected", "not_selected", "nothing: it was eligible but another warp issued"),
    _stall("short_scoreboard", "exec_dependency", "an MIO result (shared memory, MUFU), not L1TEX"),
    _stall("sleeping", "sleeping", "nanosleep to expire"),
    _stall("tex_throttle", "texture", "a slot in the TEX queue"),
    _stall("wait", "exec_dependency", "a fixed-latency dependency"),
    _stall("gmma", "pipe_busy", "warpgroup MMA (Hopper)"),
)
STALLS = (
    *WARP_STATES,
    _nvprof_stall("exec_dependency", "an input not yet available (ncu: short_scoreboard + wait)"),
    _nvprof_stall("memory_throttle", "memory pipeline throttle (ncu: drain + lg_throttle)"),
    _nvprof_stall("pipe_busy", "a busy compute pipeline (ncu: math_pipe_throttle + mio_throttle)"),
    _nvprof_stall("sync", "a __syncthreads or memory barrier (ncu: barrier + membar)"),
    _nvprof_stall("other", "other reasons (ncu: dispatch_stall + misc)"),
)

M = MetricDef
CATALOG: tuple[MetricDef, ...] = (
    # time and clocks
    M("duration_ns", "time", "ns", "kernel duration on the GPU", "sum"),
    M("cycles_elapsed", "time", "cycles", "elapsed SM cycles, averaged over SMs", "sum"),
    M("sm_active_cycles", "time", "cycles", "cycles with at least one warp in flight, averaged over SMs", "sum"),
    M("sm_clock_hz", "time", "Hz", "SM clock during the launch", _TIME_WEIGHTED),
    M("dram_clock_hz", "time", "Hz", "DRAM clock during the launch", _TIME_WEIGHTED),
    M("l2_clock_hz", "time", "Hz", "L2 (LTS) clock during the launch", _TIME_WEIGHTED),
    M("l1_clock_hz", "time", "Hz", "L1/TEX clock during the launch", _TIME_WEIGHTED),
    # floating point (thread-level, predicated-on: masked lanes do not count)
    M("fadd", "fp", "inst", "FP32 add instructions executed by threads", "sum"),
    M("fmul", "fp", "inst", "FP32 multiply instructions executed by threads", "sum"),
    M("ffma", "fp", "inst", "FP32 fused multiply-add instructions executed by threads (2 FLOPs each)", "sum"),
    M(
        "fp32_flops",
        "fp",
        "FLOP",
        "FP32 FLOPs as nvprof counts them (fadd + fmul + 2 ffma); ncu runs derive the same from the three counters",
        "sum",
    ),
    M("fp32_inst", "fp", "inst", "all FP32 instructions executed by threads", "sum"),
    M("instructions", "issue", "inst", "warp instructions executed", "sum"),
    # stalls
    *STALLS,
    M("stall_selected", "issue", "warps per issue cycle", "the warp that issued (not a stall)", _ISSUE_WEIGHTED),
    M(
        "warps_per_issue",
        "issue",
        "warps per issue cycle",
        "active warps per issue-active cycle: the cycles between two issues, the sum over all states",
        _ISSUE_WEIGHTED,
    ),
    # caches
    M("l1_hit_rate", "cache", "%", "L1/TEX hit rate over all sectors", "weighted:l1_sectors"),
    M("l1_global_load_hit_rate", "cache", "%", "L1/TEX hit rate of global loads", "weighted:l1_global_load_sectors"),
    M("l2_hit_rate", "cache", "%", f"L2 hit rate over all sectors; {_L2_OVER_100}", "weighted:l2_sectors"),
    M("l2_read_hit_rate", "cache", "%", "L2 hit rate of reads", "weighted:l2_read_sectors"),
    # A store counts as a hit, so writes read about 100 %, and over it as l2_hit_rate says (an answer on
    # NVIDIA's forum: https://forums.developer.nvidia.com/t/l2-hit-rate-always-at-100/257458).
    M(
        "l2_write_hit_rate",
        "cache",
        "%",
        "L2 hit rate of writes (ncu counts a store as a hit: about 100 %; above it as l2_hit_rate explains)",
        "weighted:l2_write_sectors",
    ),
    # traffic: L1/TEX (global, local), shared memory, L2, DRAM. A sector is 32 bytes.
    M("l1_global_load_requests", "traffic", "requests", "global load requests to L1/TEX", "sum"),
    M("l1_global_load_sectors", "traffic", "sectors", "sectors of global loads at L1/TEX", "sum"),
    M("l1_global_store_requests", "traffic", "requests", "global store requests to L1/TEX", "sum"),
    M("l1_global_store_sectors", "traffic", "sectors", "sectors of global stores at L1/TEX", "sum"),
    M("l1_local_load_sectors", "traffic", "sectors", "sectors of local (spill) loads at L1/TEX", "sum"),
    M("l1_local_store_sectors", "traffic", "sectors", "sectors of local (spill) stores at L1/TEX", "sum"),
    M("l1_requests", "traffic", "requests", "all requests to L1/TEX", "sum"),
    M("l1_sectors", "traffic", "sectors", "all sectors accessed at L1/TEX", "sum"),
    M("l1_bytes", "traffic", "bytes", "bytes accessed at L1/TEX", "sum"),
    M("shared_load_wavefronts", "traffic", "wavefronts", "shared-memory load wavefronts (nvprof: transactions)", "sum"),
    M(
        "shared_store_wavefronts",
        "traffic",
        "wavefronts",
        "shared-memory store wavefronts (nvprof: transactions)",
        "sum",
    ),
    M("shared_load_bank_conflicts", "traffic", "conflicts", "bank conflicts of shared-memory loads", "sum"),
    M("shared_store_bank_conflicts", "traffic", "conflicts", "bank conflicts of shared-memory stores", "sum"),
    M("shared_bytes", "traffic", "bytes", "shared-memory bytes the instructions asked for", "sum"),
    M("l2_read_sectors", "traffic", "sectors", "L2 sectors read (nvprof's count adds atomics and reductions)", "sum"),
    M(
        "l2_write_sectors",
        "traffic",
        "sectors",
        "L2 sectors written (nvprof's count adds atomics and reductions)",
        "sum",
    ),
    M("l2_sectors", "traffic", "sectors", "all L2 sectors accessed", "sum"),
    M("l2_bytes", "traffic", "bytes", "bytes accessed at L2", "sum"),
    M("l2_to_l1_read_bytes", "traffic", "bytes", "bytes read from L2 into L1/TEX", "sum"),
    M("l1_to_l2_write_bytes", "traffic", "bytes", "bytes written from L1/TEX to L2", "sum"),
    M("dram_read_sectors", "traffic", "sectors", "sectors read from DRAM", "sum"),
    M("dram_write_sectors", "traffic", "sectors", "sectors written to DRAM", "sum"),
    M("dram_read_bytes", "traffic", "bytes", "bytes read from DRAM", "sum"),
    M("dram_write_bytes", "traffic", "bytes", "bytes written to DRAM", "sum"),
    M(
        "l1_lg_writeback_cycles",
        "traffic",
        "cycles",
        "cycles L1/TEX wrote back local/global data (x128 bytes: the L1 roofline's traffic)",
        "sum",
    ),
    # throughput, % of the unit's peak
    M("sm_throughput_pct", "throughput", "%", "compute (SM) throughput, % of peak", _TIME_WEIGHTED),
    M("memory_throughput_pct", "throughput", "%", "memory throughput (busiest unit), % of peak", _TIME_WEIGHTED),
    M("l1_throughput_pct", "throughput", "%", "L1/TEX throughput, % of peak", _TIME_WEIGHTED),
    M("shared_throughput_pct", "throughput", "%", "shared-memory wavefronts, % of peak", _TIME_WEIGHTED),
    M("l2_throughput_pct", "throughput", "%", "L2 throughput, % of peak", _TIME_WEIGHTED),
    M("dram_throughput_pct", "throughput", "%", "DRAM throughput, % of peak", _TIME_WEIGHTED),
    # utilization
    M("achieved_occupancy", "utilization", "%", "active warps per cycle, % of the SM's maximum", _TIME_WEIGHTED),
    M(
        "sm_efficiency",
        "utilization",
        "%",
        "cycles with a warp active on the SM sub-partition, % of elapsed",
        _TIME_WEIGHTED,
    ),
    M("ipc", "utilization", "inst/cycle", "warp instructions executed per active cycle, per SM", _TIME_WEIGHTED),
    M("issue_slot_pct", "utilization", "%", "issue slots used, % of active cycles", _TIME_WEIGHTED),
    M("eligible_warps", "utilization", "warps/cycle", "warps eligible to issue per active cycle", _TIME_WEIGHTED),
    M(
        "warp_execution_efficiency",
        "utilization",
        "%",
        "active threads per executed instruction, % of 32",
        _TIME_WEIGHTED,
    ),
    M("fma_pipe_pct", "utilization", "%", "FMA pipe (FP32) busy, % of active cycles", _TIME_WEIGHTED),
    M(
        "alu_pipe_pct",
        "utilization",
        "%",
        "ALU pipe (integer, logic, FP32 compare) busy, % of active cycles",
        _TIME_WEIGHTED,
    ),
    M("lsu_pipe_pct", "utilization", "%", "load/store pipe instructions, % of peak", _TIME_WEIGHTED),
    M("xu_pipe_pct", "utilization", "%", "special-function (XU) pipe instructions, % of peak", _TIME_WEIGHTED),
    # nvprof's utilization levels, 0 (idle) to 10 (max): the units paper 003's Figures 12 and 17 use
    *(
        M(f"{unit}_utilization_level", "utilization", "level 0-10", f"nvprof {what} utilization level", _TIME_WEIGHTED)
        for unit, what in (
            ("fp32_fu", "single-precision function unit"),
            ("ldst_fu", "load/store function unit"),
            ("special_fu", "special function unit"),
            ("shared", "shared memory"),
            ("l1", "unified (L1/TEX) cache"),
            ("l2", "L2 cache"),
            ("dram", "device memory"),
        )
    ),
    # peaks per cycle, for the roofline (x the measured clock)
    M("ffma_peak_per_cycle", "peak", "inst/cycle", "peak FFMA thread instructions per SM cycle, whole GPU", "max"),
    M("dram_bytes_peak_per_cycle", "peak", "bytes/cycle", "peak DRAM bytes per DRAM cycle", "max"),
    M("l2_to_l1_bytes_peak_per_cycle", "peak", "bytes/cycle", "peak L2-to-L1 read bytes per L2 cycle", "max"),
    M(
        "l1_lg_writeback_peak_per_cycle",
        "peak",
        "cycles/cycle",
        "peak L1/TEX local/global writeback per L1 cycle (x128 bytes)",
        "max",
    ),
    # what ncu adds to every raw-page row
    M("replay_passes", "profiler", "passes", "replay passes ncu needed for this launch", "max"),
)

BY_NAME = {m.name: m for m in CATALOG}
FAMILIES = tuple(dict.fromkeys(m.family for m in CATALOG))


def metric_def_rows() -> list[dict]:
    """The catalog as rows of the store's ``metric_def`` table."""
    return [
        dict(name=m.name, family=m.family, unit=m.unit, description=m.description, rollup=m.rollup, category=m.category)
        for m in CATALOG
    ]


@dataclass(frozen=True)
class Source:
    """A collector's name for one catalog metric; its value x ``scale`` is in the catalog's unit."""

    metric: str  # the catalog's name
    name: str  # the collector's (ncu: the base name with its rollup or submetric)
    scale: float = 1.0
    min_cc: float = 0.0  # the collector knows the name from this compute capability on
    max_cc: float = 99.0  # ... up to this one (ncu 2025.3 lists no lsu_writeback on an H100)
    requested: bool = True  # False: reported unasked (ncu's raw page), so never asked for

    @property
    def base(self) -> str:
        """The name a listing of the collector's metrics shows: without rollup and submetric."""
        return self.name.split(".", 1)[0]


class Sources:
    """One collector's names for the catalog's metrics (each collector's module defines its
    ``SOURCES``): what to ask it for on a GPU, and its output translated into the catalog's names
    and units. Each catalog metric is named once, and each name means one metric."""

    def __init__(self, collector: str, sources: tuple[Source, ...]):
        self.collector, self.all = collector, sources
        self.by_metric = {s.metric: s for s in sources}
        self.by_name = {s.name: s for s in sources}
        unknown = [s.metric for s in sources if s.metric not in BY_NAME]
        if unknown or len(self.by_metric) != len(sources) or len(self.by_name) != len(sources):
            raise ValueError(f"{collector}'s metric names are not one per catalog metric: {unknown or 'repeated'}")

    def requested(self, cc: float | None = None) -> list[str]:
        """The names to ask the collector for on a GPU of compute capability ``cc`` (any, with None)."""
        return [s.name for s in self.all if s.requested and (cc is None or s.min_cc <= cc <= s.max_cc)]

    def names(self, metrics) -> dict[str, str]:
        """The collector's name of each of ``metrics`` (catalog names it collects)."""
        return {metric: self.by_metric[metric].name for metric in metrics if metric in self.by_metric}

    def translate(self, values: Mapping[str, float | None]) -> dict[str, float | None]:
        """Catalog name -> value in the catalog's unit, from the collector's name -> value (names
        outside the catalog dropped)."""
        return {
            self.by_name[n].metric: None if v is None else v * self.by_name[n].scale
            for n, v in values.items()
            if n in self.by_name
        }
