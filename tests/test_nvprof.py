"""The nvprof parsers (metrics, GPU trace, plain-text metrics), on real public output
(tests/data/ncu), fuzzed, damaged and pathological lines."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profiler_samples import read

from tracker.errors import ParseError
from tracker.profilers import nvprof

# --- nvprof ------------------------------------------------------------------------------------


def test_nvprof_metrics_map_onto_the_catalog():
    kernels = nvprof.parse_metrics(read("nvprof-metrics-csv-k20c-stalls.csv"))
    assert len(kernels) == 4
    k1 = kernels["__kernel___forma_kernel__1__(float*, int, int, float*)"]
    assert k1["invocations"] == 3
    v = k1["values"]
    assert v["stall_long_scoreboard"] == pytest.approx(23.316966)  # stall_memory_dependency
    assert v["stall_exec_dependency"] == pytest.approx(17.855091)
    assert v["achieved_occupancy"] == pytest.approx(85.1412)  # nvprof's 0.851412, as a percentage
    assert v["fp32_flops"] == 673_384_360 and v["l1_global_load_sectors"] == 19_998_022


def test_nvprof_plain_text_metrics():
    """The V100 excerpt: nvprof without --csv, the full Volta stall set, hit rates, FP counts."""
    text = read("nvprof-metrics-text-v100-kernel-excerpt.txt")
    (kernel,) = nvprof.parse_metrics_text(text).values()
    v = kernel["values"]
    assert kernel["invocations"] == 1
    assert v["ffma"] == 5.6236e10 and v["fmul"] == 1_320_801_560 and v["fadd"] == 0
    assert v["l1_hit_rate"] == 52.71 and v["l2_hit_rate"] == 24.81  # tex_cache_hit_rate, l2_tex_hit_rate
    assert v["stall_no_instruction"] == 47.62 and v["stall_long_scoreboard"] == 25.9  # inst_fetch, memory_dep.
    assert v["achieved_occupancy"] == pytest.approx(12.3716) and v["l2_utilization_level"] == 2  # "Low (2)"
    line = next(x for x in text.splitlines() if "sm_efficiency (80 instances)" in x)
    per_sm = [float(c.rstrip("%")) for c in line[line.index("[") + 1 : line.index("]")].split()]
    assert len(per_sm) == 80 and v["sm_efficiency"] == pytest.approx(sum(per_sm) / 80)  # one value per SM


def test_nvprof_gpu_trace():
    launches = nvprof.parse_trace(read("nvprof-gputrace-csv-k20c.csv"))
    assert len(launches) == 12  # memory copies left out
    assert launches[0].kernel == "__kernel___forma_kernel__0__(float*, int, int, float*)"  # no [correlation id]
    assert launches[0].metrics["duration_ns"] == pytest.approx(7_922_282)  # 7.922282 ms
    assert launches[0].values["Grid X"] == 257


@pytest.mark.parametrize(
    "text, expected",
    [
        ("83.340104%", 83.340104),
        ("636.79GB/s", 636.79e9),
        ("High (8)", 8.0),
        ("3.3255e+10", 3.3255e10),
        ("0.000000", 0.0),
    ],
)
def test_nvprof_values(text, expected):
    assert nvprof.value(text) == pytest.approx(expected)


def test_nvprof_command_profiles_per_launch_between_start_and_stop():
    cmd = nvprof.command(["python", "w.py"], ["achieved_occupancy", "stall_sync"], "log.csv")
    assert cmd[:3] == ["nvprof", "--profile-from-start", "off"] and "--print-gpu-trace" in cmd
    assert cmd[cmd.index("--metrics") + 1] == "achieved_occupancy,stall_sync" and cmd[-2:] == ["python", "w.py"]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_fuzzed_nvprof_output_fails_clearly(text):
    for parse, head in (
        (nvprof.parse_metrics, '"Device","Kernel","Invocations","Metric Name"'),
        (nvprof.parse_trace, '"Start","Duration"'),
        (nvprof.parse_metrics_text, "Kernel: k\n"),
    ):
        try:
            parse(head + text)
        except ParseError:
            pass


NVPROF_TEXT = read("nvprof-metrics-text-v100-kernel-excerpt.txt")


@pytest.mark.parametrize(
    "token, expected",
    [("n/a", None), ("nan", None), ("1e999", ParseError), ("x" * 140_000, ParseError), ("-", ParseError)],
    ids=["n/a", "nan", "1e999", "a 140 KB field", "dash"],
)
def test_nvprof_metric_cells_real_profilers_print(token, expected):
    text = read("nvprof-metrics-csv-k20c-stalls.csv")
    first = next(line for line in text.splitlines() if line.startswith('"Tesla'))
    damaged = text.replace(first, first.rsplit(",", 1)[0] + f',"{token}"', 1)
    if expected is ParseError:
        with pytest.raises(ParseError):
            nvprof.parse_metrics(damaged)
    else:
        values = [k["values"] for k in nvprof.parse_metrics(damaged).values()]
        assert any(None in v.values() for v in values)


def test_an_untimed_launch_in_the_nvprof_trace_has_no_duration():
    text = read("nvprof-gputrace-csv-k20c.csv")
    first_kernel = next(line for line in text.splitlines() if "forma_kernel__0" in line)
    cells = first_kernel.split(",")
    damaged = text.replace(first_kernel, ",".join([cells[0], "n/a", *cells[2:]]), 1)
    launches = nvprof.parse_trace(damaged)
    assert launches[0].metrics["duration_ns"] is None and launches[1].metrics["duration_ns"] > 0


def test_nvprof_text_with_an_empty_or_unavailable_instance_list():
    line = next(line for line in NVPROF_TEXT.splitlines() if "instances)" in line)
    for listed in ("[ ]", "[ n/a n/a ]"):
        damaged = NVPROF_TEXT.replace(line, line[: line.index("[")] + listed)
        (kernel,) = nvprof.parse_metrics_text(damaged).values()
        assert kernel["values"]["sm_efficiency"] is None


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(NVPROF_TEXT)), st.integers(0, len(NVPROF_TEXT)), st.text(max_size=30))
def test_fuzzed_nvprof_text_parses_or_fails_clearly(i, j, junk):
    try:
        kernels = nvprof.parse_metrics_text(NVPROF_TEXT[:i] + junk + NVPROF_TEXT[j:])
    except ParseError:
        return
    assert all(isinstance(k["values"], dict) for k in kernels.values())


class _TooSlow(Exception):
    pass


def _within(seconds: float, parse, text: str):
    """``parse(text)`` in at most ``seconds``: SIGALRM interrupts a regex that backtracks, so a
    regression fails here in seconds instead of hanging for hours."""
    import signal
    import time

    def _stop(signum, frame):
        raise _TooSlow(f"still parsing after {seconds} s")

    previous = signal.signal(signal.SIGALRM, _stop)
    signal.setitimer(signal.ITIMER_REAL, 5 * seconds)
    started = time.monotonic()
    try:
        try:
            parse(text)
        except ParseError:
            pass
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - started < seconds


LONG = 100_000  # a line of 4,000 spaces took 217 s before the line reader stopped backtracking


@pytest.mark.parametrize(
    "line",
    [
        "1 a" + " " * LONG,
        "1 a" + " " * LONG + "x",
        "  Kernel: " + " " * LONG + "x",
        "1 sm_efficiency (80 instances)" + " " * LONG + "[",
        "1 a b" + " x" * (LONG // 2),
        "1 a" + " (1)" * LONG,
    ],
    ids=["spaces", "spaces then a token", "kernel line", "instance list never closed", "many tokens", "levels"],
)
def test_nvprof_text_reads_a_pathological_line_in_linear_time(line):
    _within(2.0, nvprof.parse_metrics_text, "Kernel: k\n" + line + "\n")


def test_nvprof_trace_reads_a_long_kernel_name_in_linear_time():
    text = read("nvprof-gputrace-csv-k20c.csv")
    long_name = '"' + " " * LONG + 'x [115]"'  # the [correlation id] search backtracked over the spaces
    _within(
        2.0,
        nvprof.parse_trace,
        text.replace('"__kernel___forma_kernel__0__(float*, int, int, float*) [115]"', long_name, 1),
    )


@pytest.mark.parametrize(
    "cell",
    ["1e999", "1e999%", "-1e999GB/s", "inf", "High (" + "9" * 400 + ")", "9" * 5000],
    ids=["1e999", "1e999%", "-1e999GB/s", "inf", "a 400-digit level", "5000 digits"],
)
def test_nvprof_refuses_infinite_values_like_ncu(cell):
    """ncu_csv.number refuses 1e999; nvprof reads every figure through it, units and levels too."""
    with pytest.raises(ValueError):
        nvprof.value(cell)
    line = f"    1   achieved_occupancy   Achieved Occupancy   0.5   0.5   {cell}"
    with pytest.raises(
        ParseError,
        match=rf"^v100\.txt: line 2: achieved_occupancy: cannot read the value "
        rf"'{re.escape(cell[:40])}'",
    ):
        nvprof.parse_metrics_text(f"Kernel: k\n{line}\n", "v100.txt")
    text = read("nvprof-metrics-csv-k20c-stalls.csv")
    first = next(line for line in text.splitlines() if line.startswith('"Tesla'))
    with pytest.raises(ParseError, match=r"^k20c\.csv: cannot read '"):
        nvprof.parse_metrics(text.replace(first, first.rsplit(",", 1)[0] + f',"{cell}"', 1), "k20c.csv")
    trace = f'"Start","Duration","achieved_occupancy","Name"\ns,ns,,\n1.0,2.0,"{cell}","k(float*) [7]"\n'
    with pytest.raises(ParseError, match=r"^trace\.csv: launch 0 \(k\(float\*\)\), achieved_occupancy: cannot read"):
        nvprof.parse_trace(trace, "trace.csv")


def test_nvprof_a_count_of_5000_digits_is_a_parse_error():
    """int() refuses over 4,300 digits with a bare ValueError; the Invocations cell says so instead."""
    line = f"    {'9' * 5000}   achieved_occupancy   Achieved Occupancy   0.5   0.5   0.5"
    with pytest.raises(ParseError, match=r"line 2: cannot read the invocations '9{40}' \(5000 characters\)"):
        nvprof.parse_metrics_text(f"Kernel: k\n{line}\n")
    text = read("nvprof-metrics-csv-k20c-stalls.csv")
    first = next(line for line in text.splitlines() if line.startswith('"Tesla'))
    damaged = text.replace(first, first.replace('",3,"', f'",{"9" * 5000},"', 1), 1)  # Invocations: 3
    with pytest.raises(ParseError, match=r"cannot read the invocations '9{40}' \(5000 characters\)"):
        nvprof.parse_metrics(damaged)


def test_nvprof_text_line_reader():
    """The line reader that replaced the regexes: a level Avg, an instance list, lines it skips; an
    instance list cut short is refused (the regex fell through and took the last SM's value as Avg)."""
    text = (
        "==1== Metric result:\nInvocations   Metric Name   Metric Description   Min   Max   Avg\n"
        'Device "Tesla V100 (0)"\n    Kernel: k(float*)  \n'
        "    2   l2_utilization   L2 Cache Utilization   Low (1)   Low (2)   Mid (5)\n"
        "    2   sm_efficiency (2 instances)   Multiprocessor Activity   -   -   [ 50.0% 70.0% ]\n"
    )
    ((name, kernel),) = nvprof.parse_metrics_text(text).items()
    assert name == "k(float*)" and kernel["invocations"] == 2
    assert kernel["values"] == {"l2_utilization_level": 5.0, "sm_efficiency": 60.0}
    with pytest.raises(ParseError, match="line 6: sm_efficiency lists no per-instance values"):
        nvprof.parse_metrics_text(text.replace("70.0% ]", "70.0%"))
