"""Real ncu and nvprof samples, damaged the ways files get damaged: each parses or fails in one line."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiler_samples import read

from tracker.errors import ParseError
from tracker.profilers import ncu_csv, nvprof

PARSED_SAMPLES = [
    (nvprof.parse_metrics, "nvprof-metrics-csv-k20c-stalls.csv"),
    (nvprof.parse_trace, "nvprof-gputrace-csv-k20c.csv"),
    (nvprof.parse_metrics_text, "nvprof-metrics-text-v100-kernel-excerpt.txt"),
    (ncu_csv.parse, "ncu-raw-h100-sm90-ncu2025.3-alexnet-b1.csv"),
    (ncu_csv.parse, "ncu-details-v100-ncu2020.1-nvtx-dram.csv"),
]
TOKENS = ["n/a", "nan", "NaN", "[ ]", "[]", "1e999", "-inf", "-", "", '"', "x" * 140_000, "High (", "12%%", "[ 1 n/a ]"]


@st.composite
def mutation(draw, text: str) -> str:
    """A real sample, damaged the ways files get damaged: cut short, a byte flipped, two lines
    swapped, a line deleted, a cell replaced by a token profilers really print (or a huge one)."""
    lines = text.splitlines(keepends=True)
    kind = draw(st.sampled_from(["truncate", "flip", "swap", "delete", "cell"]))
    if kind == "truncate":
        return text[: draw(st.integers(0, len(text)))]
    if kind == "flip":
        at = draw(st.integers(0, len(text) - 1))
        return text[:at] + chr(ord(text[at]) ^ (1 << draw(st.integers(0, 6)))) + text[at + 1 :]
    i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
    if kind == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == "delete":
        del lines[i]
    else:
        sep = "," if "," in lines[i] else None
        cells = lines[i].split(sep)
        if not cells:  # a blank line: nothing to replace
            return text
        k = draw(st.integers(0, len(cells) - 1))
        token = draw(st.sampled_from(TOKENS))
        cells[k] = f'"{token}"' if sep and cells[k].startswith('"') else token
        lines[i] = (sep or " ").join(cells) + ("" if lines[i].endswith("\n") or sep else "\n")
    return "".join(lines)


@pytest.mark.slow  # 150 damaged copies of each sample, the largest a whole AlexNet ncu export
@pytest.mark.parametrize("parse, name", PARSED_SAMPLES, ids=[name for _, name in PARSED_SAMPLES])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_damaged_real_samples_parse_or_fail_in_one_line(parse, name, data):
    """Every damaged sample either parses or raises the parsers' one-line ParseError; nothing else."""
    text = data.draw(mutation(read(name)))
    try:
        parse(text)
    except ParseError as exc:
        assert "\n" not in str(exc)
