"""How the GPU suite reports on a lent machine, whose call a time limit cuts (a pytest plugin,
loaded by conftest.py; it acts on tests marked ``gpu`` only).

Twice on an H200 (2026-11-26) the suite was cut by its call's limit before pytest printed its
summary, and with the summary went the only copy of why the failed tests failed: pytest
captures a test's output, descriptors included, and shows it at the end. So:

- each GPU test's time (setup, which holds its fixtures' profiles, and call) and, where it failed,
  its whole report are written to the terminal the moment it ends; so is what a passing test
  printed (a table for the README: pytest would drop it);
- with ``TRACKER_SUITE_DEADLINE`` set (seconds since the epoch), a GPU test that would start after
  it is skipped as out of time, so pytest ends on its own and prints its summary;
- under pytest-xdist (tools/gpu_stage.sh runs the tests that need no counters on several
  workers), a profile that tests of several workers read is made once, by ``once``.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

DEADLINE = "TRACKER_SUITE_DEADLINE"
_config: pytest.Config | None = None
_deadline: float | None = None
_setup_s: dict[str, float] = {}  # each running GPU test's setup time


def pytest_configure(config):
    global _config, _deadline
    _config = config
    value = os.environ.get(DEADLINE)
    try:
        _deadline = float(value) if value else None
    except ValueError:
        raise pytest.UsageError(f"{DEADLINE} must be seconds since the epoch, not {value!r}") from None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if "gpu" in item.keywords and _deadline is not None and time.time() > _deadline:
        pytest.skip(f"out of time: the suite's deadline ({DEADLINE}) has passed")


def pytest_runtest_logreport(report):
    # pytest's terminal reporter writes past the capture (registered after this plugin's configure)
    reporter = _config.pluginmanager.get_plugin("terminalreporter") if _config else None
    if "gpu" not in report.keywords or reporter is None:
        return
    if report.failed:
        reporter.write_line(
            f"\n--- {report.nodeid} failed in {report.when} ---\n{report.longreprtext}\n--- end of {report.nodeid} ---"
        )
    if report.when == "call" and report.passed and report.capstdout:
        reporter.write_line(
            f"\n--- {report.nodeid} printed ---\n{report.capstdout.rstrip()}\n--- end of {report.nodeid} ---"
        )
    if report.when == "setup":
        _setup_s[report.nodeid] = report.duration
    if report.when == "call" or (report.when == "setup" and report.failed):
        setup, call = _setup_s.pop(report.nodeid, 0.0), report.duration if report.when == "call" else 0.0
        reporter.write_line(f"    {report.nodeid}: {setup + call:.1f} s (setup {setup:.1f} s, call {call:.1f} s)")


def shared_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of this pytest run that all its xdist workers see: their own temporary folders'
    parent (pytest-xdist's documented recipe); without xdist, the run's own."""
    folder = tmp_path_factory.getbasetemp()
    return folder.parent if os.environ.get("PYTEST_XDIST_WORKER") else folder


def once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[], Any]) -> Any:
    """``make()``'s result (JSON), made by the first process of this pytest run that asks for
    ``name`` and read by the rest: every xdist worker sets up a module's fixtures for itself, so
    a profile fixture would otherwise run once per worker. A ``make`` that fails or skips keeps
    nothing (the next to ask tries again)."""
    kept = shared_folder(tmp_path_factory) / f"{name}.json"
    with open(kept.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        if kept.exists():
            return json.loads(kept.read_text())
        value = make()
        kept.write_text(json.dumps(value))
        return value
