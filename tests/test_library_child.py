"""The library arm's pass 1 runs in a child process (tracker/library/torch_run.py's docstring: on an
H200, PyTorch's profiler teardown aborted a library experiment after its results were stored).

No GPU here: the parent's side runs real children that behave as pass 1's can (an ``Error:`` line,
an abort, a hang interrupted), and the real child itself runs up to the point a GPU is needed.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest

from tracker.errors import ProfilerFailed, TrackerError
from tracker.gpu.workload import Workload

pytest.importorskip("torch")

from tracker.library.torch_run import run_child_process  # noqa: E402


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_every_line_the_child_prints_is_echoed_as_it_comes():
    seen: list[str] = []
    run_child_process(
        python("import sys; print('warm-up 1/1'); print('iteration 1/2', file=sys.stderr); print('iteration 2/2')"),
        seen.append,
    )
    assert seen == ["warm-up 1/1", "iteration 1/2", "iteration 2/2"]


def test_the_childs_error_line_is_the_one_line_error():
    seen: list[str] = []
    with pytest.raises(TrackerError) as caught:
        run_child_process(
            python("print('warm-up 1/1'); print('Error: mymodels:build raised ValueError: no');raise SystemExit(1)"),
            seen.append,
        )
    assert str(caught.value) == "mymodels:build raised ValueError: no"
    assert seen == ["warm-up 1/1"]  # the error is said once, by the CLI
    assert not isinstance(caught.value, ProfilerFailed)


def test_a_child_that_aborts_is_a_failed_profile_with_its_status_and_last_line():
    with pytest.raises(ProfilerFailed, match=r"exited with status -6: double free or corruption \(!prev\)"):
        run_child_process(
            python("import os, sys; print('double free or corruption (!prev)', flush=True); os.abort()"),
            lambda line: None,
        )


def test_an_interrupted_parent_stops_the_child(tmp_path):
    # Python's own Ctrl-C handler, whatever this process started with (a background job, as CI may
    # run, starts with SIGINT ignored, and Python then installs none)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupted_parent_stops_the_child(tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupted_parent_stops_the_child(tmp_path):
    pid_file = tmp_path / "pid"
    code = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); print('up', flush=True); "
        "time.sleep(60)"
    )
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))

    def echo(line: str) -> None:
        timer.start()  # once the child is up: the parent's Ctrl-C lands while it waits on the child

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_child_process(python(code), echo)
    assert time.monotonic() - started < 30
    child = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # stopped and reaped: no orphan holds the GPU


def test_the_real_child_reports_a_model_that_does_not_import_as_one_line(tmp_path):
    """``python -m tracker.library.torch_run`` itself: it fails before it needs a GPU, and its
    error reaches the parent as the line the user would have seen in-process."""
    spec = Workload("no_such_module_here:build", batch=1, implementation="torch").to_json()
    with pytest.raises(TrackerError) as caught:
        run_child_process([sys.executable, "-m", "tracker.library.torch_run", spec, str(tmp_path)], lambda line: None)
    assert "no_such_module_here" in str(caught.value) and "\n" not in str(caught.value)
    assert not list(tmp_path.iterdir())  # nothing left that reads as a trace


def test_a_child_out_of_memory_is_an_out_of_memory_error():
    """What the memory experiment records on the arm and goes on from (PyTorch's allocator's words kept)."""
    from tracker.errors import OutOfMemory

    with pytest.raises(OutOfMemory, match=r"^out of memory: CUDA out of memory\. Tried to allocate 2\.00 GiB$"):
        run_child_process(
            python(
                "print('Error: out of memory: CUDA out of memory. Tried to allocate 2.00 GiB'); raise SystemExit(1)"
            ),
            lambda line: None,
        )
