"""The CUPTI Range Profiler binding (tracker/profilers/cupti_range.py) against the headers the
nvidia-cuda-cupti wheel ships, with no GPU: a C program built with gcc from those headers prints
each struct's size, its CUPTI_PROFILER_STRUCT_SIZE and every field's offset and size, and the
enum values the binding names; ctypes must say the same. And libcupti exports every call."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tracker.errors import ProfilerFailed
from tracker.profilers import cupti_range

ENUMS = {
    "CUPTI_AutoRange": cupti_range.AUTO_RANGE,
    "CUPTI_UserRange": cupti_range.USER_RANGE,
    "CUPTI_ApplicationReplay": cupti_range.APPLICATION_REPLAY,
    "CUPTI_KernelReplay": cupti_range.KERNEL_REPLAY,
    "CUPTI_UserReplay": cupti_range.USER_REPLAY,
    "CUPTI_CACHE_CONTROL_MODE_NONE": cupti_range.CACHE_CONTROL_NONE,
    "CUPTI_CACHE_CONTROL_MODE_ALL": cupti_range.CACHE_CONTROL_ALL,
    "CUPTI_PROFILER_TYPE_RANGE_PROFILER": cupti_range.RANGE_PROFILER,
    "CUPTI_METRIC_TYPE_COUNTER": cupti_range.COUNTER,
    "CUPTI_METRIC_TYPE_RATIO": cupti_range.RATIO,
    "CUPTI_METRIC_TYPE_THROUGHPUT": cupti_range.THROUGHPUT,
}
# Structs cut before fields later libcupti added (cupti_range.py): the field the struct stops
# before, in nvidia-cuda-cupti 13.5.25's header (13.0.85's ends where ours does)
CUT = {"CUpti_Profiler_Host_Initialize_Params": "pSinglePassMetricSetName"}


def c_program() -> str:
    lines = [
        "#include <stddef.h>",
        "#include <stdio.h>",
        "#include <cupti_profiler_target.h>",
        "#include <cupti_profiler_host.h>",
        "#include <cupti_range_profiler.h>",
        "#include <cupti_target.h>",
        "int main(void) {",
    ]
    for name, struct in cupti_range.STRUCTS.items():
        last = struct._fields_[-1][0]
        lines.append(f'printf("{name} %zu %zu\\n", sizeof({name}), (size_t){name}_STRUCT_SIZE);')
        lines.append(f'printf("{name}.through %zu 0\\n", (size_t)CUPTI_PROFILER_STRUCT_SIZE({name}, {last}));')
        if name in CUT:
            lines.append(f'printf("{name}.{CUT[name]} %zu 0\\n", offsetof({name}, {CUT[name]}));')
        for field, _ in struct._fields_:
            lines.append(
                f'printf("{name}.{field} %zu %zu\\n", offsetof({name}, {field}), sizeof((({name}*)0)->{field}));'
            )
    lines += [f'printf("{enum} %d 0\\n", (int){enum});' for enum in ENUMS]
    return "\n".join([*lines, "return 0;", "}"])


@pytest.fixture(scope="module")
def layout(tmp_path_factory) -> dict[str, tuple[int, int]]:
    """What the C compiler says, from the headers beside the libcupti the binding loads."""
    from cuda.pathfinder import find_nvidia_header_directory

    if shutil.which("gcc") is None:
        pytest.fail("gcc is needed to read the CUPTI headers' layouts (Debian: gcc)")
    cupti = Path(cupti_range.library()._name).resolve().parents[1] / "include"
    assert (cupti / "cupti_range_profiler.h").exists(), cupti
    folder = tmp_path_factory.mktemp("cupti")
    (folder / "layout.c").write_text(c_program())
    subprocess.run(
        [
            "gcc",
            f"-I{cupti}",
            f"-I{find_nvidia_header_directory('cudart')}",
            str(folder / "layout.c"),
            "-o",
            str(folder / "layout"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    out = subprocess.run([str(folder / "layout")], check=True, capture_output=True, text=True).stdout
    return {name: (int(a), int(b)) for name, a, b in (line.split() for line in out.splitlines())}


@pytest.mark.parametrize("name", sorted(cupti_range.STRUCTS))
def test_every_struct_is_laid_out_as_the_header_says(layout, name):
    import ctypes

    struct = cupti_range.STRUCTS[name]
    for field, kind in struct._fields_:
        assert (getattr(struct, field).offset, ctypes.sizeof(kind)) == layout[f"{name}.{field}"], field
    assert struct.struct_size() == layout[f"{name}.through"][0] == struct.new().structSize
    if name in CUT:  # a prefix of the header's: the header's struct goes on
        assert struct.struct_size() < layout[name][1] and ctypes.sizeof(struct) <= layout[name][0]
        assert layout[f"{name}.{CUT[name]}"][0] >= struct.struct_size()  # the field added after ours
    else:
        assert (ctypes.sizeof(struct), struct.struct_size()) == layout[name]


def test_a_struct_sent_to_an_older_libcupti_stops_before_what_it_lacks():
    enable = cupti_range.STRUCTS["CUpti_RangeProfiler_Enable_Params"]
    assert enable.new(through="pRangeProfilerObject").structSize == 32 < enable.new().structSize == 36
    assert cupti_range.CACHE_CONTROL_SINCE == 130401


def test_the_enum_values_are_the_headers(layout):
    assert {enum: layout[enum][0] for enum in ENUMS} == ENUMS


def test_libcupti_exports_every_call_the_binding_makes():
    lib = cupti_range.library()
    for struct in cupti_range.STRUCTS.values():
        assert hasattr(lib, struct.function), struct.function
    assert hasattr(lib, "cuptiGetResultString") and hasattr(lib, "cuptiGetVersion")


def test_a_failing_call_is_one_line_naming_it():
    """A struct CUPTI refuses (structSize 0), with a driver or without one: the error says which call."""
    params = cupti_range.STRUCTS["CUpti_Profiler_Initialize_Params"].new()
    params.structSize = 0
    with pytest.raises(ProfilerFailed, match=r"^cuptiProfilerInitialize failed: ") as failed:
        cupti_range.call(params)
    assert "\n" not in str(failed.value)


class FakeCupti:
    """libcupti answering every call with ``code`` (CUptiResult), as a machine that cannot count would."""

    def __init__(self, code: int):
        self.code = code

    def __getattr__(self, name: str):
        return lambda *args: self.code


@pytest.mark.parametrize(
    "code, words",
    [
        (14, "not compatible with the installed driver"),
        (35, "ERR_NVGPUCTRPERM"),
        (27, "does not support this GPU"),
        (43, "MIG slice"),
        (46, "chip"),
    ],
)
def test_what_rules_cupti_out_here_is_one_line_that_says_so(monkeypatch, code, words):
    """A driver older than CUPTI needs, restricted counters, an unsupported GPU: BackendUnavailable
    (what a collector falls back on), one line naming the call and what to do."""
    from tracker.errors import BackendUnavailable

    monkeypatch.setattr(cupti_range, "library", lambda: FakeCupti(code))
    with pytest.raises(BackendUnavailable, match=r"^cuptiRangeProfilerEnable failed: ") as refused:
        cupti_range.call(cupti_range.STRUCTS["CUpti_RangeProfiler_Enable_Params"].new())
    assert words in str(refused.value) and "\n" not in str(refused.value)
    assert ("--backend ncu" in str(refused.value)) == (code != 35)  # restricted counters stop ncu too


def test_a_missing_libcupti_is_one_line(monkeypatch):
    from tracker.errors import BackendUnavailable

    cupti_range.library.cache_clear()
    monkeypatch.setattr(cupti_range, "wheel_libcupti", lambda: None)
    monkeypatch.setattr(
        "cuda.pathfinder.load_nvidia_dynamic_lib",
        lambda name: (_ for _ in ()).throw(RuntimeError("Failure finding libcupti.so")),
    )
    try:
        with pytest.raises(BackendUnavailable, match=r"^no usable libcupti \(RuntimeError: Failure finding") as missing:
            cupti_range.library()
        assert "pip install -e '.[cupti]'" in str(missing.value) and "\n" not in str(missing.value)
    finally:
        cupti_range.library.cache_clear()


def test_libcupti_and_its_nvperf_libraries_load_from_one_folder():
    """The pinned wheel's libcupti and the nvperf libraries it dlopens, from its own folder, in a
    process of its own: on an H200 another libcupti (PyTorch's) and another nvperf (the system
    toolkit's) answered first, and cupti-python's host calls failed (tests/data/gpu-2026-11-26c-h200)."""
    probe = (
        "from tracker.profilers import cupti_range as c; c.library(); "
        "print(sorted({l.split()[-1] for l in open('/proc/self/maps') if 'cupti.so' in l or 'nvperf' in l}))"
    )
    loaded = eval(subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout)
    folder = cupti_range.wheel_libcupti().parent
    assert loaded == sorted(str(folder / name) for name in ("libcupti.so.13", *cupti_range.COMPANIONS))
