"""A CUPTI Range Profiler session in tracker's own process: the core of the in-process collector,
with auto range (each kernel launch is a range, numbered in launch order) and user replay
(tracker replays each layer phase itself: tracker/gpu/replay.py).

Both sides are libcupti's own calls through ``cupti_range`` (ctypes): the host side (``Host``: the
chip's metrics, a config image from metric names, values from counter data) and the device side. A
session profiles one step at a time: ``begin`` sets the config for the step's passes, ``start`` and
``stop`` bracket each pass (``stop`` says when every pass is in), and ``ranges`` decodes them, each
range's name and the metrics' values. ``PhasePasses`` drives it through the layer phases of a step.

cupti-python's host side was the first choice, but it needs libcupti 13.3 or later, and PyTorch's
CUDA 13 wheels pin 13.0: pip cannot install both, and PyTorch's older libcupti answers
cupti-python's calls with ERROR_INVALID_PARAMETER (recorded in tests/data/gpu-2026-11-26c-h200).
libcupti's own host calls work from CUDA 12.6's on.

Auto range names each range by its place in the step ('0', '1', ...; tests/data/gpu-2026-11-26d-h200).
``auto`` does not pick this collector until its counts agree with ncu's
(``tests/test_gpu.py::test_cupti_and_ncu_agree_on_what_ncu_reproduces``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tracker.errors import BackendUnavailable
from tracker.profilers import cupti_range as api

if TYPE_CHECKING:
    from tracker.profilers.cupti_collector import Phase

DELIMITER = b"/"
METRIC_TYPES = (api.COUNTER, api.RATIO, api.THROUGHPUT)  # not CUpti_MetricType's __COUNT, which CUPTI refuses


def _struct(name: str, **values: Any) -> Any:
    """``name``'s CUPTI call with ``values`` (``through``: a struct cut for an older libcupti)."""
    return api.call(api.STRUCTS[name].new(**values))


def _names(metrics: Sequence[str]) -> Any:
    return (ctypes.c_char_p * len(metrics))(*(m.encode() for m in metrics))


class Host:
    """CUPTI's profiler host object for ``chip``'s range profiler (cupti_profiler_host.h)."""

    def __init__(self, chip: str):
        self.object = _struct(
            "CUpti_Profiler_Host_Initialize_Params", profilerType=api.RANGE_PROFILER, pChipName=chip.encode()
        ).pHostObject

    def close(self) -> None:
        if self.object:
            _struct("CUpti_Profiler_Host_Deinitialize_Params", pHostObject=self.object)
            self.object = None

    def base_metrics(self) -> set[str]:
        """Every base metric the chip's profiler knows, of each type."""
        found: set[str] = set()
        for kind in METRIC_TYPES:
            got = _struct("CUpti_Profiler_Host_GetBaseMetrics_Params", pHostObject=self.object, metricType=kind)
            found |= {got.ppMetricNames[i].decode() for i in range(got.numMetrics)}
        return found

    def config_image(self, metrics: Sequence[str]) -> Any:
        """The config image that collects ``metrics`` (a ctypes byte array)."""
        names = _names(metrics)
        _struct(
            "CUpti_Profiler_Host_ConfigAddMetrics_Params",
            pHostObject=self.object,
            ppMetricNames=names,
            numMetrics=len(metrics),
        )
        size = _struct("CUpti_Profiler_Host_GetConfigImageSize_Params", pHostObject=self.object).configImageSize
        image = (ctypes.c_uint8 * size)()
        _struct(
            "CUpti_Profiler_Host_GetConfigImage_Params",
            pHostObject=self.object,
            configImageSize=size,
            pConfigImage=ctypes.addressof(image),
        )
        return image

    def passes(self, image: Any) -> int:
        """How many passes ``image`` takes: each layer phase runs that many times."""
        return _struct(
            "CUpti_Profiler_Host_GetNumOfPasses_Params",
            configImageSize=len(image),
            pConfigImage=ctypes.addressof(image),
        ).numOfPasses

    def evaluate(self, counter_data: Any, index: int, metrics: Sequence[str]) -> list[float]:
        """``metrics``' values in range ``index`` of the decoded ``counter_data``."""
        values = (ctypes.c_double * len(metrics))()
        _struct(
            "CUpti_Profiler_Host_EvaluateToGpuValues_Params",
            pHostObject=self.object,
            pCounterDataImage=ctypes.addressof(counter_data),
            counterDataImageSize=len(counter_data),
            rangeIndex=index,
            ppMetricNames=_names(metrics),
            numMetrics=len(metrics),
            pMetricValues=values,
        )
        return list(values)


class RangeSession:
    """One range-profiling session on the current CUDA context of device ``device``, for the
    perfworks (ncu) ``metrics``, with room for ``max_ranges`` launches in a step."""

    def __init__(self, metrics: Sequence[str], max_ranges: int, device: int = 0):
        self.metrics, self.max_ranges, self.device = list(metrics), max_ranges, device
        self.object: int | None = None
        self.host: Host | None = None
        self.skipped: list[str] = []  # metrics the chip does not know, left out
        self.settings: dict[str, Any] = {}  # what the run records of how it counted (run.collector_settings)

    def __enter__(self) -> RangeSession:
        _struct("CUpti_Profiler_Initialize_Params")
        try:
            self._open()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _open(self) -> None:
        self.host = Host(self.chip())
        known = self.host.base_metrics()
        self.skipped = [m for m in self.metrics if m.split(".", 1)[0] not in known]  # this chip has no such counter
        self.metrics = [m for m in self.metrics if m not in self.skipped]
        self.config = self.host.config_image(self.metrics)
        version = api.version()
        cache = version >= api.CACHE_CONTROL_SINCE  # else the libcupti cannot be told
        self.object = _struct(
            "CUpti_RangeProfiler_Enable_Params",
            ctx=_current_context(),
            **(dict(cacheControlMode=api.CACHE_CONTROL_ALL) if cache else dict(through="pRangeProfilerObject")),
        ).pRangeProfilerObject
        self.settings = {
            "range": "auto",
            "replay": "user",
            "cache_control": "all" if cache else "libcupti's default",
            "passes": self.host.passes(self.config),
            "libcupti": version,
        }
        size = _struct(
            "CUpti_RangeProfiler_GetCounterDataSize_Params",
            pRangeProfilerObject=self.object,
            pMetricNames=_names(self.metrics),
            numMetrics=len(self.metrics),
            maxNumOfRanges=self.max_ranges,
            maxNumRangeTreeNodes=self.max_ranges,
        ).counterDataSize
        self.counter_data = (ctypes.c_uint8 * size)()

    def __exit__(self, *exc: Any) -> None:
        if self.object is not None:
            _struct("CUpti_RangeProfiler_Disable_Params", pRangeProfilerObject=self.object)
            self.object = None
        if self.host is not None:
            self.host.close()
        _struct("CUpti_Profiler_DeInitialize_Params")

    def chip(self) -> str:
        return (_struct("CUpti_Device_GetChipName_Params", deviceIndex=self.device).pChipName or b"").decode()

    def begin(self) -> None:
        """A fresh counter data image, and the config for one step's passes (pass 0 first)."""
        _struct(
            "CUpti_RangeProfiler_CounterDataImage_Initialize_Params",
            pRangeProfilerObject=self.object,
            counterDataSize=len(self.counter_data),
            pCounterData=ctypes.addressof(self.counter_data),
        )
        _struct(
            "CUpti_RangeProfiler_SetConfig_Params",
            pRangeProfilerObject=self.object,
            configSize=len(self.config),
            pConfig=ctypes.addressof(self.config),
            counterDataImageSize=len(self.counter_data),
            pCounterDataImage=ctypes.addressof(self.counter_data),
            range=api.AUTO_RANGE,
            replayMode=api.USER_REPLAY,
            maxRangesPerPass=self.max_ranges,
            numNestingLevels=1,
            minNestingLevel=1,
            passIndex=0,
            targetNestingLevel=1,
        )

    def start(self) -> None:
        _struct("CUpti_RangeProfiler_Start_Params", pRangeProfilerObject=self.object)

    def stop(self) -> bool:
        return bool(_struct("CUpti_RangeProfiler_Stop_Params", pRangeProfilerObject=self.object).isAllPassSubmitted)

    def ranges(self) -> list[tuple[str, dict[str, float]]]:
        """The step's ranges in launch order: each one's name and metric values. Auto range names a
        range by its place in the step ('0', '1', ...), not by its kernel."""
        assert self.host is not None
        _struct("CUpti_RangeProfiler_DecodeData_Params", pRangeProfilerObject=self.object)
        where = dict(pCounterDataImage=ctypes.addressof(self.counter_data), counterDataImageSize=len(self.counter_data))
        count = _struct("CUpti_RangeProfiler_GetCounterDataInfo_Params", **where).numTotalRanges
        found = []
        for index in range(count):
            name = _struct(
                "CUpti_RangeProfiler_CounterData_GetRangeInfo_Params",
                rangeIndex=index,
                rangeDelimiter=DELIMITER,
                **where,
            ).rangeName
            values = self.host.evaluate(self.counter_data, index, self.metrics)
            found.append(((name or b"").decode(), dict(zip(self.metrics, values))))
        return found


class PhasePasses:
    """A session as the passes of one layer phase after another (``Passes`` of tracker/gpu/replay.py):
    a phase's first pass begins a fresh counter image, and once CUPTI has every pass of it, its
    ranges (one per launch, in launch order, their numbers running on across phases: the
    collector's ``_in_launch_order``) are the next of ``phases``, under the phase's name."""

    def __init__(self, session: Any):
        self.session, self.fresh, self.phase = session, True, ""
        self.phases: list[Phase] = []

    def start(self, phase: str) -> None:
        if self.fresh:
            self.session.begin()
            self.fresh, self.phase = False, phase
        self.session.start()

    def stop(self) -> bool:
        done = bool(self.session.stop())
        if done:
            self.phases.append((self.phase, self.session.ranges()))
            self.fresh = True
        return done


def _current_context() -> int:
    """The calling thread's CUDA context (CuPy's or PyTorch's, once it has run anything), as CUPTI
    takes it: the driver's own cuCtxGetCurrent, through ctypes (tracker's GPU code holds CuPy's imports)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        raise BackendUnavailable("the CUPTI collector needs the CUDA driver (libcuda.so.1)") from None
    context = ctypes.c_void_p()
    if cuda.cuCtxGetCurrent(ctypes.byref(context)) != 0 or not context.value:
        raise BackendUnavailable("the CUPTI collector found no CUDA context in this thread")
    return context.value
