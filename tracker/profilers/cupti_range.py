"""CUPTI's Range Profiler as ctypes sees it: the device side of an in-process counter collector,
and its host side (config images, metric values). One small module, checked against
the headers ``nvidia-cuda-cupti`` ships: every struct's size, every field's offset and size, and
each ``*_STRUCT_SIZE`` (tests/test_cupti_range.py, with no GPU).

The calls, as CUPTI's range_profiling sample makes them: ``cuptiProfilerInitialize``, then per
context ``cuptiRangeProfilerEnable``; a counter data image sized for the metrics and ranges
(``GetCounterDataSize``, ``CounterDataImageInitialize``); ``SetConfig`` with the config image the
host side makes (auto range: each kernel launch its own range; user replay: tracker replays the
launches itself, once per pass); ``Start`` and ``Stop`` around each pass until ``Stop`` says every
pass is submitted; ``DecodeData``; the ranges read back (``GetCounterDataInfo``,
``CounterDataGetRangeInfo``) and evaluated on the host; ``Disable``, ``cuptiProfilerDeInitialize``.

"""

from __future__ import annotations

import ctypes
import importlib.metadata
from ctypes import POINTER, c_char_p, c_double, c_int, c_size_t, c_uint8, c_uint16, c_uint32, c_void_p
from functools import cache
from pathlib import Path
from typing import Any

from tracker.errors import BackendUnavailable, ProfilerFailed
from tracker.extras import install
from tracker.profilers.ncu import PERMISSION_HELP

# CUpti_ProfilerRange and CUpti_ProfilerReplayMode (cupti_profiler_target.h), CUpti_CacheControl_Mode
AUTO_RANGE, USER_RANGE = 1, 2
APPLICATION_REPLAY, KERNEL_REPLAY, USER_REPLAY = 1, 2, 3
CACHE_CONTROL_NONE, CACHE_CONTROL_ALL = 0, 1


class _Params(ctypes.Structure):
    """A CUPTI profiler parameter struct: ``structSize`` first, as CUPTI_PROFILER_STRUCT_SIZE counts
    it (up to the end of the last field, without the tail padding), then ``pPriv``, NULL."""

    function: str  # the CUPTI call that takes it

    @classmethod
    def struct_size(cls, through: str | None = None) -> int:
        """CUPTI_PROFILER_STRUCT_SIZE through the field ``through`` (default: the last): a libcupti
        older than a field takes the struct without it."""
        name = through or cls._fields_[-1][0]
        field = getattr(cls, name)
        return field.offset + field.size

    @classmethod
    def new(cls, through: str | None = None, **values: Any) -> _Params:
        return cls(structSize=cls.struct_size(through), **values)


def _params(name: str, function: str, *fields: tuple[str, Any]) -> type[_Params]:
    head = [("structSize", c_size_t), ("pPriv", c_void_p)]
    return type(name, (_Params,), {"_fields_": head + list(fields), "function": function})


_OBJECT = ("pRangeProfilerObject", c_void_p)
_HOST = ("pHostObject", c_void_p)
_NAMES = (("ppMetricNames", POINTER(c_char_p)), ("numMetrics", c_size_t))

# The oldest libcupti with the Range Profiler and Host APIs is CUDA 12.6's; PyTorch's CUDA 13 wheels
# bring 13.0 (and pin it: no other nvidia-cuda-cupti installs beside them). Each struct is laid out as
# the headers of nvidia-cuda-cupti 13.5.25 say (tests/test_cupti_range.py), as far as 13.0.85's
# headers have it too: Host_Initialize stops before pSinglePassMetricSetName (13.2, PM sampling's),
# and RangeProfiler_Enable's cacheControlMode (13.4) is sent only to a libcupti that knows it.
CACHE_CONTROL_SINCE = 130401  # cuptiGetVersion of nvidia-cuda-cupti 13.4.92, the first with cacheControlMode
RANGE_PROFILER, COUNTER, RATIO, THROUGHPUT = 0, 0, 1, 2  # CUpti_ProfilerType, CUpti_MetricType

STRUCTS: dict[str, type[_Params]] = {
    s.__name__: s
    for s in (
        _params("CUpti_Profiler_Initialize_Params", "cuptiProfilerInitialize"),
        _params("CUpti_Profiler_DeInitialize_Params", "cuptiProfilerDeInitialize"),
        _params(
            "CUpti_Device_GetChipName_Params",
            "cuptiDeviceGetChipName",
            ("deviceIndex", c_size_t),
            ("pChipName", c_char_p),
        ),
        _params(
            "CUpti_RangeProfiler_Enable_Params",
            "cuptiRangeProfilerEnable",
            ("ctx", c_void_p),
            _OBJECT,
            ("cacheControlMode", c_int),
        ),
        _params("CUpti_RangeProfiler_Disable_Params", "cuptiRangeProfilerDisable", _OBJECT),
        _params(
            "CUpti_RangeProfiler_SetConfig_Params",
            "cuptiRangeProfilerSetConfig",
            _OBJECT,
            ("configSize", c_size_t),
            ("pConfig", c_void_p),
            ("counterDataImageSize", c_size_t),
            ("pCounterDataImage", c_void_p),
            ("range", c_int),
            ("replayMode", c_int),
            ("maxRangesPerPass", c_size_t),
            ("numNestingLevels", c_uint16),
            ("minNestingLevel", c_uint16),
            ("passIndex", c_size_t),
            ("targetNestingLevel", c_uint16),
        ),
        _params("CUpti_RangeProfiler_Start_Params", "cuptiRangeProfilerStart", _OBJECT),
        _params(
            "CUpti_RangeProfiler_Stop_Params",
            "cuptiRangeProfilerStop",
            _OBJECT,
            ("passIndex", c_size_t),
            ("targetNestingLevel", c_size_t),
            ("isAllPassSubmitted", c_uint8),
        ),
        _params(
            "CUpti_RangeProfiler_DecodeData_Params",
            "cuptiRangeProfilerDecodeData",
            _OBJECT,
            ("numOfRangeDropped", c_size_t),
        ),
        _params(
            "CUpti_RangeProfiler_GetCounterDataSize_Params",
            "cuptiRangeProfilerGetCounterDataSize",
            _OBJECT,
            ("pMetricNames", POINTER(c_char_p)),
            ("numMetrics", c_size_t),
            ("maxNumOfRanges", c_size_t),
            ("maxNumRangeTreeNodes", c_uint32),
            ("counterDataSize", c_size_t),
        ),
        _params(
            "CUpti_RangeProfiler_CounterDataImage_Initialize_Params",
            "cuptiRangeProfilerCounterDataImageInitialize",
            _OBJECT,
            ("counterDataSize", c_size_t),
            ("pCounterData", c_void_p),
        ),
        _params(
            "CUpti_RangeProfiler_GetCounterDataInfo_Params",
            "cuptiRangeProfilerGetCounterDataInfo",
            ("pCounterDataImage", c_void_p),
            ("counterDataImageSize", c_size_t),
            ("numTotalRanges", c_size_t),
        ),
        _params(
            "CUpti_RangeProfiler_CounterData_GetRangeInfo_Params",
            "cuptiRangeProfilerCounterDataGetRangeInfo",
            ("pCounterDataImage", c_void_p),
            ("counterDataImageSize", c_size_t),
            ("rangeIndex", c_size_t),
            ("rangeDelimiter", c_char_p),
            ("rangeName", c_char_p),
        ),
        # the host side: config images from metric names, values from counter data (cupti_profiler_host.h)
        _params(
            "CUpti_Profiler_Host_Initialize_Params",
            "cuptiProfilerHostInitialize",
            ("profilerType", c_int),
            ("pChipName", c_char_p),
            ("pCounterAvailabilityImage", c_void_p),
            _HOST,
        ),
        _params("CUpti_Profiler_Host_Deinitialize_Params", "cuptiProfilerHostDeinitialize", _HOST),
        _params(
            "CUpti_Profiler_Host_GetBaseMetrics_Params",
            "cuptiProfilerHostGetBaseMetrics",
            _HOST,
            ("metricType", c_int),
            *_NAMES,
        ),
        _params("CUpti_Profiler_Host_ConfigAddMetrics_Params", "cuptiProfilerHostConfigAddMetrics", _HOST, *_NAMES),
        _params(
            "CUpti_Profiler_Host_GetConfigImageSize_Params",
            "cuptiProfilerHostGetConfigImageSize",
            _HOST,
            ("configImageSize", c_size_t),
        ),
        _params(
            "CUpti_Profiler_Host_GetConfigImage_Params",
            "cuptiProfilerHostGetConfigImage",
            _HOST,
            ("configImageSize", c_size_t),
            ("pConfigImage", c_void_p),
        ),
        _params(
            "CUpti_Profiler_Host_GetNumOfPasses_Params",
            "cuptiProfilerHostGetNumOfPasses",
            ("configImageSize", c_size_t),
            ("pConfigImage", c_void_p),
            ("numOfPasses", c_size_t),
        ),
        _params(
            "CUpti_Profiler_Host_EvaluateToGpuValues_Params",
            "cuptiProfilerHostEvaluateToGpuValues",
            _HOST,
            ("pCounterDataImage", c_void_p),
            ("counterDataImageSize", c_size_t),
            ("rangeIndex", c_size_t),
            *_NAMES,
            ("pMetricValues", POINTER(c_double)),
        ),
    )
}


# What libcupti dlopens by bare name, loaded first from libcupti's own folder: otherwise another
# CUDA's may answer (on an H200 PyTorch's libcupti 13.0 loaded the system toolkit's nvperf).
COMPANIONS = ("libnvperf_host.so", "libnvperf_target.so")


@cache
def library() -> ctypes.CDLL:
    """libcupti with its nvperf libraries, all from one folder and loaded before PyTorch loads one
    (it then links to this one): the installed nvidia-cuda-cupti's (PyTorch's own, where it is
    installed), else where cuda-pathfinder finds one. BackendUnavailable in one line where there is none."""
    try:
        path = wheel_libcupti() or Path(_pathfinder_libcupti())
        for companion in COMPANIONS:
            if (path.parent / companion).exists():
                ctypes.CDLL(str(path.parent / companion), mode=ctypes.RTLD_GLOBAL)
        return ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    except Exception as exc:  # ImportError, cuda.pathfinder's not-found errors, OSError
        raise BackendUnavailable(
            f"no usable libcupti ({type(exc).__name__}: {str(exc).strip()[:160]}): {install('cupti')}"
        ) from None


def wheel_libcupti() -> Path | None:
    """libcupti as the installed nvidia-cuda-cupti distribution holds it (the first on sys.path)."""
    try:
        files = importlib.metadata.files("nvidia-cuda-cupti") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    found = sorted(f for f in files if f.name.startswith("libcupti.so"))
    return Path(str(found[0].locate())) if found else None


def describe_library() -> str:
    """Which libcupti ``library`` loads, as the run records it: its wheel's version, else its path."""
    path = Path(library()._name)
    if path == wheel_libcupti():
        return f"libcupti of nvidia-cuda-cupti {importlib.metadata.version('nvidia-cuda-cupti')}"
    return f"libcupti at {path}"


def _pathfinder_libcupti() -> str:
    from cuda.pathfinder import load_nvidia_dynamic_lib

    return load_nvidia_dynamic_lib("cupti").abs_path


# CUptiResult codes (cupti_result.h) that say this machine cannot count with CUPTI at all: a
# collector that meets one falls back to ncu (BackendUnavailable), saying why in one line.
_NCU = "; use --backend ncu"
NOT_HERE = {
    14: "this libcupti is not compatible with the installed driver (a driver older than it needs): install a newer "
    "driver, or an nvidia-cuda-cupti as old as the driver" + _NCU,
    35: PERMISSION_HELP,
    40: "the virtual GPU gives this VM no performance counters" + _NCU,
    27: "CUPTI's range profiler does not support this GPU" + _NCU,
    33: "CUPTI does not profile a virtualized GPU" + _NCU,
    41: "CUPTI does not profile in confidential computing mode" + _NCU,
    42: "CUPTI does not profile a CMP device" + _NCU,
    43: "CUPTI does not profile a MIG slice" + _NCU,
    44: "CUPTI does not profile an SLI group" + _NCU,
    45: "CUPTI does not profile under WSL" + _NCU,
    46: "CUPTI does not know this GPU's chip" + _NCU,
}


def call(params: _Params) -> _Params:
    """``params``' CUPTI call. Where it fails: BackendUnavailable for what rules CUPTI out on this
    machine (``NOT_HERE``), else ProfilerFailed; either way one line naming the call."""
    lib = library()
    result = getattr(lib, params.function)(ctypes.byref(params))
    if result == 0:
        return params
    text = c_char_p()
    lib.cuptiGetResultString(result, ctypes.byref(text))
    raise refused(params.function, result, (text.value or b"").decode() or f"CUPTI error {result}")


def version() -> int:
    """libcupti's API version (cuptiGetVersion): 130500 for CUDA 13.5's."""
    found = c_uint32()
    code = library().cuptiGetVersion(ctypes.byref(found))
    if code:
        raise refused("cuptiGetVersion", code, f"CUPTI error {code}")
    return found.value


def refused(function: str, code: int | None, text: str) -> BackendUnavailable | ProfilerFailed:
    if code in NOT_HERE:
        return BackendUnavailable(f"{function} failed: {NOT_HERE[code]}")
    return ProfilerFailed(f"{function} failed: {text}")
