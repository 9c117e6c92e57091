"""The GPU suite's reporting (tests/suite_plugin.py) on a stand-in suite: pytest runs three
tests marked ``gpu`` in a child, as on the lent machine, with the plugin loaded."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

SUITE = """
import pytest

pytestmark = pytest.mark.gpu

@pytest.fixture
def slow_profile():
    import time
    time.sleep(0.2)

def test_passes(slow_profile):
    pass

def test_fails():
    import sys
    print("the child's last line", file=sys.stderr)
    assert 1 == 2, "the join found invocation 7 missing"

def test_also_passes():
    print("metric,agrees")
    print("instructions,True")
"""


@pytest.fixture
def suite(pytester):
    pytester.makeini("[pytest]\nmarkers =\n    gpu: needs a GPU\n")
    pytester.makeconftest(
        f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\nimport suite_plugin\n\n"
        "def pytest_configure(config):\n"
        "    config.pluginmanager.register(suite_plugin, 'tracker_suite')\n"
    )
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def test_a_failure_and_each_tests_time_are_written_as_the_test_ends(suite):
    result = suite.runpytest_subprocess("-v", "-p", "no:cacheprovider")
    lines = result.stdout.lines
    failed_at = next(i for i, line in enumerate(lines) if "test_suite.py::test_fails failed in call" in line)
    summary_at = next(i for i, line in enumerate(lines) if "short test summary" in line or "= FAILURES =" in line)
    told = "\n".join(lines[failed_at:summary_at])
    assert "the join found invocation 7 missing" in told  # before the summary, which a cut would lose
    assert failed_at < next(i for i, line in enumerate(lines) if "test_also_passes" in line)
    took = next(line for line in lines if "test_suite.py::test_passes:" in line)
    setup = float(took.split("setup ")[1].split(" s")[0])
    assert setup >= 0.2  # the fixture's time is the setup's
    printed_at = lines.index("--- test_suite.py::test_also_passes printed ---")
    assert lines[printed_at + 1 : printed_at + 3] == ["metric,agrees", "instructions,True"]
    assert printed_at < summary_at  # a passing test's print, which pytest drops, is kept as it ends
    result.assert_outcomes(passed=2, failed=1)


def test_past_the_deadline_what_is_left_is_skipped_and_the_summary_prints(suite, monkeypatch):
    monkeypatch.setenv("TRACKER_SUITE_DEADLINE", str(time.time() - 1))
    result = suite.runpytest_subprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines(["*out of time: the suite's deadline (TRACKER_SUITE_DEADLINE) has passed*"])


def test_a_deadline_that_is_no_time_is_a_usage_error(suite, monkeypatch):
    monkeypatch.setenv("TRACKER_SUITE_DEADLINE", "soon")
    result = suite.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*TRACKER_SUITE_DEADLINE must be seconds since the epoch, not 'soon'*"])


SHARED = """
import os
import pytest
from suite_plugin import once

pytestmark = pytest.mark.gpu

def make(name):
    with open(os.environ["MADE"], "a") as log:
        log.write(f"{name} {os.environ.get('PYTEST_XDIST_WORKER', 'main')}\\n")
    return [name, 7]

@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    return once(tmp_path_factory, "profile", lambda: make("profile"))

@pytest.fixture(scope="module")
def skipped(tmp_path_factory):
    return once(tmp_path_factory, "skipped", lambda: pytest.skip("no ncu here"))

@pytest.mark.parametrize("n", range(8))
def test_reads_the_profile(profile, n):
    assert profile == ["profile", 7]

def test_skips(skipped):
    pass
"""


@pytest.mark.parametrize("workers", [(), ("-n", "3")])
def test_a_profile_fixture_is_made_once_in_a_run_whatever_its_workers(suite, tmp_path, monkeypatch, workers):
    """tools/gpu_stage.sh runs the tests that need no counters on several xdist workers, each of
    which sets up a module's fixtures for itself: ``once`` makes each profile once in the run."""
    if workers:
        pytest.importorskip("xdist")
    made = tmp_path / "made.txt"
    monkeypatch.setenv("MADE", str(made))
    suite.makepyfile(test_suite=SHARED)
    result = suite.runpytest_subprocess(*workers, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=8, skipped=1)
    lines = made.read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["profile"]
    if workers:
        assert lines[0].split()[1].startswith("gw")
