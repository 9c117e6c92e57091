"""The ncu CSV parser, on real public output (tests/data/ncu) and fuzzed copies of it."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiler_samples import NCU_FILES, SAMPLE, read

from tracker.errors import ParseError
from tracker.profilers import ncu_csv

# --- ncu CSV -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", NCU_FILES, ids=lambda p: p.name)
def test_every_ncu_sample_parses(path):
    launches = ncu_csv.parse(path.read_text(encoding="utf-8"), path.name)
    assert launches and [launch.id for launch in launches] == list(range(len(launches)))
    assert all(launch.kernel and launch.values for launch in launches)


def test_details_page_with_bom_crlf_and_program_output():
    (launch,) = ncu_csv.parse(read("ncu-details-rtx5070-sm120-ncu2026.2-gemm_tiled.csv"))
    assert launch.kernel == "void unnamed>::gemm_tiled_kernel<32>(const float *, const float *, float *, int, int, int)"
    assert launch.values["gpu__time_duration.sum"] == 10_195_552 and launch.units["gpu__time_duration.sum"] == "nsecond"
    assert launch.values["dram__bytes_op_read.sum"] == 53_261_312
    assert launch.attributes["Block Size"] == "(32, 32, 1)" and launch.attributes["CC"] == "12.0"
    assert launch.metrics["l2_hit_rate"] == 87.5
    assert launch.metrics["l1_global_load_sectors"] == 67_108_864
    assert launch.metrics["warp_execution_efficiency"] == pytest.approx(100.0)  # 32 threads of 32


def test_old_details_page_from_2020():
    launches = ncu_csv.parse(read("ncu-details-v100-ncu2020.1-nvtx-dram.csv"))
    assert len(launches) == 8
    assert launches[0].kernel.startswith("ij_deriv_kernel(int, int, int, thrust::complex<double> const*")
    assert launches[0].values["dram__bytes.sum"] == 690_960_320
    assert launches[0].metrics["sm_clock_hz"] == pytest.approx(1_309_394_950.84)
    assert launches[0].metrics["cycles_elapsed"] == pytest.approx(1_209_252.43)


def test_raw_page_with_units_row():
    launches = ncu_csv.parse(read("ncu-raw-b200-sm100-flashattn-decode.csv"))
    assert len(launches) == 16
    first = launches[0]
    assert first.kernel.startswith("void flash_fwd_splitkv_combine_kernel<")
    assert first.metrics["duration_ns"] == 11904 and first.metrics["replay_passes"] == 11
    assert first.attributes["device__attribute_display_name"] == "NVIDIA B200"
    assert first.attributes["Grid Size"] == "(64, 1, 1)"


@pytest.mark.parametrize(
    "value, unit, expected",
    [
        (1.5, "usecond", (1500.0, "nsecond")),
        (2.0, "msecond", (2e6, "nsecond")),
        (3.0, "ns", (3.0, "nsecond")),
        (4.0, "Mbyte", (4e6, "byte")),
        (1.2, "Gbyte/second", (1.2e9, "byte/second")),
        (1.4, "cycle/nsecond", (1.4e9, "cycle/second")),
        (1.98, "Ghz", (1.98e9, "hz")),
        (87.5, "%", (87.5, "%")),
        (5.0, "Kinst", (5000.0, "inst")),
        (2.0, "register/thread", (2.0, "register/thread")),
    ],
)
def test_units_are_normalised(value, unit, expected):
    got = ncu_csv.normalise(value, unit)
    assert got[0] == pytest.approx(expected[0]) and got[1] == expected[1]


def test_clear_errors_for_bad_output():
    with pytest.raises(ParseError, match="ERR_NVGPUCTRPERM"):
        ncu_csv.parse("==PROF== Connected\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n")
    with pytest.raises(ParseError, match="no ncu CSV table"):
        ncu_csv.parse("hello\n")
    text = read("ncu-raw-b200-sm100-flashattn-decode.csv")
    cut = text[: len(text) - 5000]  # a log cut off mid-row
    with pytest.raises(ParseError, match=r"line \d+ has \d+ fields, the header 475"):
        ncu_csv.parse(cut, "cut.csv")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzzed_ncu_output_parses_or_fails_clearly(data):
    """Cut, spliced or garbled output: a list of launches or a ParseError, never a crash."""
    text = data.draw(
        st.one_of(
            st.text(max_size=300),
            st.builds(lambda i, j: SAMPLE[:i] + SAMPLE[j:], st.integers(0, len(SAMPLE)), st.integers(0, len(SAMPLE))),
            st.builds(
                lambda i, junk: SAMPLE[:i] + junk + SAMPLE[i:], st.integers(0, len(SAMPLE)), st.text(max_size=20)
            ),
        )
    )
    try:
        ncu_csv.parse(text)
    except ParseError:
        pass
