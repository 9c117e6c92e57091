"""Child processes in a process group of their own (a profiler and the workload it starts, pass 1's
PyTorch child): ``stop`` reaches all of them, and a Ctrl-C at the terminal reaches tracker alone,
which then stops them. And a profiler's short commands (its version, its metric listing, an
export) run to completion by ``output``. One place for every collector and child."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Callable

from tracker.errors import BackendUnavailable, ProfilerFailed

STOP_GRACE_S = 10  # a child told to stop (SIGTERM) gets this long before SIGKILL
OUTPUT_TIMEOUT_S = 600  # a listing or an export of a large report takes minutes at most


def output(cmd: list[str], what: str, failed: type[ProfilerFailed] = ProfilerFailed,
           explain: Callable[[str], None] | None = None) -> subprocess.CompletedProcess:
    """``cmd`` run to completion (``what`` names it in errors): BackendUnavailable where it cannot
    start; ``failed`` where it times out or exits non-zero, after ``explain`` has seen its output
    (to raise a more telling error, a missing permission, say)."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=OUTPUT_TIMEOUT_S)
    except OSError as exc:
        raise BackendUnavailable(f"cannot run {what}: {exc}") from None
    except subprocess.TimeoutExpired:
        raise failed(f"{what} did not finish in {OUTPUT_TIMEOUT_S // 60} minutes") from None
    if done.returncode != 0:
        if explain:
            explain(done.stdout + done.stderr)
        message = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        raise failed(f"{what} failed with status {done.returncode}: {message[0]}")
    return done


def start(cmd: list[str], **pipes) -> subprocess.Popen:
    """A profiler in a process group of its own, so that ``stop`` reaches the workload child it
    starts too, and a Ctrl-C at the terminal reaches tracker alone, which then stops them."""
    try:
        return subprocess.Popen(cmd, text=True, process_group=0, **pipes)
    except OSError as exc:
        raise BackendUnavailable(f"cannot run {cmd[0]}: {exc}") from None


def stop(proc: subprocess.Popen) -> None:
    """End a profiler started by ``start`` and everything in its group: SIGTERM, and after
    ``STOP_GRACE_S`` SIGKILL to whatever is left (a workload the profiler did not end). A
    profiler left running would hold the GPU for minutes after tracker is gone."""
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)
    proc.wait()


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:  # the whole group is gone
        pass
