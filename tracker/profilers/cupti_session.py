"""A CUPTI Range Profiler session in tracker's own process: the core of the in-process collector of
issue 47, with auto range (each kernel launch is a range, numbered in launch order) and user replay
(tracker replays each layer phase itself: tracker/gpu/replay.py).

The host side (chip name to config image, counter values from the decoded data) is NVIDIA's
``cupti-python`` (``cupti.profiler_host``); the device side is ``cupti_range`` (ctypes). A session
profiles one step at a time: ``begin`` sets the config for the step's passes, ``start`` and ``stop``
bracket each pass (``stop`` says when every pass is in), and ``ranges`` decodes them, each range's
name and the metrics' values.

**No range profiled on a GPU yet.** On an H200 (2026-11-26) the first try stopped at the host side,
twice: another libcupti had been loaded (``cupti_range.library`` now loads the wheel's), and the
enum of metric types holds an invalid ``_COUNT``. The GPU suite runs it
(``tests/test_gpu.py::test_a_cupti_range_session_counts_each_launch``); ``auto`` does not pick it
until that passes and its counts agree with ncu's.
"""

from __future__ import annotations

import ctypes
from typing import Any, Sequence

from tracker.errors import BackendUnavailable
from tracker.profilers import cupti_range as api

DELIMITER = b"/"


class RangeSession:
    """One range-profiling session on the current CUDA context of device ``device``, for the
    perfworks (ncu) ``metrics``, with room for ``max_ranges`` launches in a step."""

    def __init__(self, metrics: Sequence[str], max_ranges: int, device: int = 0):
        self.metrics, self.max_ranges, self.device = list(metrics), max_ranges, device
        self.object: int | None = None
        self.skipped: list[str] = []  # metrics the chip does not know, left out

    def __enter__(self) -> RangeSession:
        api.call(api.STRUCTS["CUpti_Profiler_Initialize_Params"].new())
        self.host = _host(self.chip())
        known = api.host_call("get_base_metrics", _base_metrics, self.host)
        self.skipped = [m for m in self.metrics if m.split(".", 1)[0] not in known]  # this chip has no such counter
        self.metrics = [m for m in self.metrics if m not in self.skipped]
        self.config = api.host_call("create_config_image", self.host.create_config_image, self.metrics)
        enabled = api.call(api.STRUCTS["CUpti_RangeProfiler_Enable_Params"].new(
            ctx=_current_context(), cacheControlMode=api.CACHE_CONTROL_ALL))
        self.object = enabled.pRangeProfilerObject
        names = (ctypes.c_char_p * len(self.metrics))(*(m.encode() for m in self.metrics))
        size = api.call(api.STRUCTS["CUpti_RangeProfiler_GetCounterDataSize_Params"].new(
            pRangeProfilerObject=self.object, pMetricNames=names, numMetrics=len(self.metrics),
            maxNumOfRanges=self.max_ranges, maxNumRangeTreeNodes=self.max_ranges)).counterDataSize
        self.counter_data = (ctypes.c_uint8 * size)()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.object is not None:
            api.call(api.STRUCTS["CUpti_RangeProfiler_Disable_Params"].new(pRangeProfilerObject=self.object))
        api.call(api.STRUCTS["CUpti_Profiler_DeInitialize_Params"].new())
        self.host.deinitialize()

    def chip(self) -> str:
        found = api.call(api.STRUCTS["CUpti_Device_GetChipName_Params"].new(deviceIndex=self.device))
        return (found.pChipName or b"").decode()

    def begin(self) -> None:
        """A fresh counter data image, and the config for one step's passes (pass 0 first)."""
        api.call(api.STRUCTS["CUpti_RangeProfiler_CounterDataImage_Initialize_Params"].new(
            pRangeProfilerObject=self.object, counterDataSize=len(self.counter_data),
            pCounterData=ctypes.addressof(self.counter_data)))
        api.call(api.STRUCTS["CUpti_RangeProfiler_SetConfig_Params"].new(
            pRangeProfilerObject=self.object, configSize=len(self.config), pConfig=self.config.ctypes.data,
            counterDataImageSize=len(self.counter_data), pCounterDataImage=ctypes.addressof(self.counter_data),
            range=api.AUTO_RANGE, replayMode=api.USER_REPLAY, maxRangesPerPass=self.max_ranges,
            numNestingLevels=1, minNestingLevel=1, passIndex=0, targetNestingLevel=1))

    def start(self) -> None:
        api.call(api.STRUCTS["CUpti_RangeProfiler_Start_Params"].new(pRangeProfilerObject=self.object))

    def stop(self) -> bool:
        stopped = api.call(api.STRUCTS["CUpti_RangeProfiler_Stop_Params"].new(pRangeProfilerObject=self.object))
        return bool(stopped.isAllPassSubmitted)

    def ranges(self) -> list[tuple[str, dict[str, float]]]:
        """The step's ranges in launch order: each one's name (its kernel's) and metric values."""
        import numpy as np

        api.call(api.STRUCTS["CUpti_RangeProfiler_DecodeData_Params"].new(pRangeProfilerObject=self.object))
        image = np.frombuffer(self.counter_data, dtype=np.uint8)
        where = dict(pCounterDataImage=ctypes.addressof(self.counter_data), counterDataImageSize=len(self.counter_data))
        count = api.call(api.STRUCTS["CUpti_RangeProfiler_GetCounterDataInfo_Params"].new(**where)).numTotalRanges
        found = []
        for index in range(count):
            info = api.call(api.STRUCTS["CUpti_RangeProfiler_CounterData_GetRangeInfo_Params"].new(
                rangeIndex=index, rangeDelimiter=DELIMITER, **where))
            values = api.host_call("evaluate_metric_values", self.host.evaluate_metric_values, image, self.metrics,
                                   index)
            found.append(((info.rangeName or b"").decode(), dict(zip(self.metrics, map(float, values)))))
        return found


class PhasePasses:
    """A session as the passes of one layer phase after another (``Passes`` of tracker/gpu/replay.py):
    a phase's first pass begins a fresh counter image, and once CUPTI has every pass of it, its
    ranges (one per launch, in launch order) join ``ranges``."""

    def __init__(self, session: Any):
        self.session, self.fresh = session, True
        self.ranges: list[tuple[str, dict[str, float]]] = []

    def start(self) -> None:
        if self.fresh:
            self.session.begin()
            self.fresh = False
        self.session.start()

    def stop(self) -> bool:
        done = bool(self.session.stop())
        if done:
            self.ranges += self.session.ranges()
            self.fresh = True
        return done


def _host(chip: str) -> Any:
    """cupti-python's host object for ``chip``'s range profiler; one line where it is missing."""
    try:
        from cupti import profiler_host
    except ImportError:
        raise BackendUnavailable("the CUPTI collector needs cupti-python: pip install -e '.[cupti]'") from None
    host = profiler_host.ProfilerHost(chip, profiler_host.ProfilerType.RANGE_PROFILER)
    api.host_call(f"ProfilerHost.initialize for chip {chip!r}", host.initialize)
    return host


def _base_metrics(host: Any) -> set[str]:
    """Every base metric the chip's profiler knows, of each type. The three by name: the enum also
    holds ``_COUNT``, which CUPTI refuses (ERROR_INVALID_PARAMETER on an H200, 2026-11-26)."""
    from cupti.profiler_host import MetricType

    return {name for kind in METRIC_TYPES for name in host.get_base_metrics(getattr(MetricType, kind))}


METRIC_TYPES = ("COUNTER", "RATIO", "THROUGHPUT")


def _current_context() -> int:
    """The calling thread's CUDA context (CuPy's, once it has run anything), as CUPTI takes it:
    the driver's own cuCtxGetCurrent, through ctypes (tracker's GPU code holds CuPy's imports)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        raise BackendUnavailable("the CUPTI collector needs the CUDA driver (libcuda.so.1)") from None
    context = ctypes.c_void_p()
    if cuda.cuCtxGetCurrent(ctypes.byref(context)) != 0 or not context.value:
        raise BackendUnavailable("the CUPTI collector found no CUDA context in this thread")
    return context.value
